// The multi-rank GoogleTest run (tests/comm/mpi_test_runner.h). Any failed assertion on any rank prints "[rank r] ..." and calls MPI_Abort, so mpirun exits
// non-zero at once instead of leaving the other ranks waiting in a collective. At the end every
// rank meets in a deadline-bounded barrier — which also lets MPI progress collectives that a
// timed-out rank abandoned — and then calls MPI_Finalize.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "tests/support/skip_all.h"

#include "comm/mpi_env.h"
#include "tests/comm/mpi_test_runner.h"

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

class AbortOnFailure : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] FAILED %s:%d: %s\n", world_rank(), r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.summary());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
};

// Final barrier within 60 s, polling so pending requests progress.
bool final_barrier() {
  MPI_Request req;
  if (MPI_Ibarrier(MPI_COMM_WORLD, &req) != MPI_SUCCESS) return false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    int flag = 0;
    if (MPI_Test(&req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (flag) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
}

}  // namespace

int run_mpi_tests(int argc, char** argv, const std::string& skip_reason) {
  int provided = 0;
  st::comm::apply_mpi_defaults();
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (world_rank() != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new AbortOnFailure);
  if (!skip_reason.empty()) ::testing::AddGlobalTestEnvironment(new st::testing_support::SkipAll(skip_reason));
  int rc = RUN_ALL_TESTS();
  const int rank = world_rank();
  if (!final_barrier()) {
    std::fprintf(stderr, "[rank %d] final barrier did not complete within 60 s\n", world_rank());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  if (rc == 0 && !skip_reason.empty()) {
    if (rank == 0) std::printf("%s: every test skipped\n", skip_reason.c_str());
    return st::testing_support::kSkipReturnCode;
  }
  return rc;
}
