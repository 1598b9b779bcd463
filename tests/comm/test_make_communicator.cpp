// make_communicator on the machine the test runs on: the node-local rank (one node under ctest),
// the backend choice and its logged reason, and a working world communicator.
#include <gtest/gtest.h>

#include "comm/make_communicator.h"
#include "comm/mpi/cuda_aware.h"
#include "tests/comm/comm_test_util.h"

namespace st::comm::test {
namespace {

TEST(MakeCommunicator, MpiWorldWithNodeLocalRank) {
  CommSetup s = make_communicator("mpi", kTestTimeout);
  const int N = world_size(), R = world_rank();
  EXPECT_EQ(s.backend, "mpi");
  EXPECT_EQ(s.local.rank, R);  // ctest runs every rank on this one node
  EXPECT_EQ(s.local.size, N);
  const std::string cuda_note = nccl_visible_devices() > 0 ? "; " + mpi::cuda_path().note : "";
  EXPECT_EQ(s.reason, "mpi: requested (--comm mpi); local rank " + std::to_string(R) + " of " + std::to_string(N) +
                          " (MPI shared-memory split)" + cuda_note);
  ASSERT_EQ(s.world->size(), N);
  EXPECT_EQ(s.world->name(), "world");
  Tensor t = Tensor::full({2}, R, DType::i32);
  s.world->all_reduce(t)->wait();
  EXPECT_EQ(t.to_double()[1], N * (N - 1) / 2.0);
}

TEST(MakeCommunicator, AutoAndNcclFollowTheMachine) {
  const int N = world_size();
  const bool nccl_possible = nccl_built() && nccl_visible_devices() >= N;
  CommSetup s = make_communicator("auto", kTestTimeout);
  EXPECT_EQ(s.backend, nccl_possible ? "nccl" : "mpi") << s.reason;
  EXPECT_EQ(s.reason.rfind(nccl_possible ? "auto -> nccl: " : "auto -> mpi: ", 0), 0u) << s.reason;
  if (nccl_possible) {
    EXPECT_EQ(s.device, world_rank());
    EXPECT_NO_THROW(make_communicator("nccl", kTestTimeout));
  } else {
    EXPECT_THROW(make_communicator("nccl", kTestTimeout), DeviceError);
  }
  EXPECT_THROW(make_communicator("tcp", kTestTimeout), ValueError);
}

// How CUDA tensors reach MPI: the environment override wins, else the library's own answer.
TEST(MakeCommunicator, CudaAwareDecision) {
  using mpi::decide_cuda_path;
  EXPECT_FALSE(decide_cuda_path(nullptr, false, 0).aware);
  EXPECT_FALSE(decide_cuda_path(nullptr, true, 0).aware);
  EXPECT_TRUE(decide_cuda_path(nullptr, true, 1).aware);
  EXPECT_TRUE(decide_cuda_path("1", false, 0).aware);
  EXPECT_FALSE(decide_cuda_path("0", true, 1).aware);
  EXPECT_FALSE(decide_cuda_path("", true, 0).aware);  // empty = unset
  EXPECT_EQ(decide_cuda_path(nullptr, true, 0).note, "CUDA tensors: pinned host staging (MPIX_Query_cuda_support() = 0)");
  EXPECT_EQ(decide_cuda_path("1", false, 0).note,
            "CUDA tensors: device pointers passed to MPI (SHARDTRAIN_MPI_CUDA_AWARE=1)");
  EXPECT_THROW(decide_cuda_path("yes", true, 1), ValueError);
  auto c = MpiCommunicator::dup(MPI_COMM_WORLD, "aware", kTestTimeout);
  EXPECT_EQ(c->cuda_aware(), mpi::cuda_path().aware);
}

}  // namespace
}  // namespace st::comm::test
