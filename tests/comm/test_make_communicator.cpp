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
  const std::string cuda_note = nccl_visible_devices() > 0 ? "; " + mpi::cuda_path(CudaAwareMode::ask).note : "";
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

// How CUDA tensors reach MPI: the options' override wins, else the library's own answer.
TEST(MakeCommunicator, CudaAwareDecision) {
  using mpi::decide_cuda_path;
  EXPECT_FALSE(decide_cuda_path(CudaAwareMode::ask, false, 0).aware);
  EXPECT_FALSE(decide_cuda_path(CudaAwareMode::ask, true, 0).aware);
  EXPECT_TRUE(decide_cuda_path(CudaAwareMode::ask, true, 1).aware);
  EXPECT_TRUE(decide_cuda_path(CudaAwareMode::on, false, 0).aware);
  EXPECT_FALSE(decide_cuda_path(CudaAwareMode::off, true, 1).aware);
  EXPECT_EQ(decide_cuda_path(CudaAwareMode::ask, true, 0).note,
            "CUDA tensors: pinned host staging (MPIX_Query_cuda_support() = 0)");
  EXPECT_EQ(decide_cuda_path(CudaAwareMode::on, false, 0).note,
            "CUDA tensors: device pointers passed to MPI (forced on: SHARDTRAIN_MPI_CUDA_AWARE=1)");
  auto c = MpiCommunicator::dup(MPI_COMM_WORLD, "aware", kTestTimeout);
  EXPECT_EQ(c->cuda_aware(), mpi::cuda_path(CudaAwareMode::ask).aware);
  CommOptions off;
  off.mpi_cuda_aware = CudaAwareMode::off;
  EXPECT_FALSE(MpiCommunicator::dup(MPI_COMM_WORLD, "staged", kTestTimeout, off)->cuda_aware());
}

// make_communicator's options reach the world and its splits; the world diagnoses deadlines.
TEST(MakeCommunicator, OptionsReachTheWorldAndItsGroups) {
  CommOptions o;
  o.max_count = 7;
  o.debug = true;
  o.flight_recorder_entries = 16;
  CommSetup s = make_communicator("mpi", kTestTimeout, o);
  EXPECT_EQ(s.world->max_count(), 7);
  EXPECT_TRUE(s.world->debug_checks());
  auto child = s.world->split(0, world_rank(), "child");
  EXPECT_EQ(child->max_count(), 7);
  EXPECT_TRUE(child->debug_checks());
  EXPECT_NE(s.world->shared_state()->diagnoser(), nullptr);
  EXPECT_EQ(child->shared_state()->diagnoser(), s.world->shared_state()->diagnoser());
  ASSERT_NE(child->shared_state()->recorder(), nullptr);
  EXPECT_EQ(child->shared_state()->recorder()->capacity(), 16u);
  o.diagnose_deadlines = false;
  EXPECT_EQ(make_communicator("mpi", kTestTimeout, o).world->shared_state()->diagnoser(), nullptr);
  o.max_count = 0;
  EXPECT_THROW(make_communicator("mpi", kTestTimeout, o), ValueError);
}

}  // namespace
}  // namespace st::comm::test
