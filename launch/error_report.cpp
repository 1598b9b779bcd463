// The one-line error and the agreement that prints it once (launch/error_report.h).
#include "launch/error_report.h"
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "comm/poll_hooks.h"
#include "launch/startup_watchdog.h"

namespace st::launch {
namespace {

MPI_Comm g_agree = MPI_COMM_NULL;

// "[rank R] " under a launcher that sets a rank (Open MPI, PMI/MPICH/Slurm's PMI, srun), else "".
// Read before main(): a process started without a launcher becomes an MPI singleton, whose
// MPI_Init sets OMPI_COMM_WORLD_RANK=0 and would give every one-process error a "[rank 0]".
std::string rank_prefix_from_env() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var); v && *v) return std::string("[rank ") + v + "] ";
  return "";
}
const std::string g_rank_prefix = rank_prefix_from_env();

void print_line(const std::string& what) {
  std::string line = what;
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  // one write() of the whole line: ranks sharing a pipe (mpirun) never interleave inside it
  const std::string out = g_rank_prefix + "shardtrain: error: " + line + "\n";
  std::fwrite(out.data(), 1, out.size(), stderr);
  std::fflush(stderr);
}

// Polls `req` until it completes or `seconds` pass; false on the deadline.
bool wait_for(MPI_Request& req, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    int done = 0;
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

void prepare_error_agreement() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized || g_agree != MPI_COMM_NULL) return;
  MPI_Comm_dup(MPI_COMM_WORLD, &g_agree);
  MPI_Comm_set_errhandler(g_agree, MPI_ERRORS_RETURN);
}

void release_error_agreement() {
  if (g_agree != MPI_COMM_NULL) MPI_Comm_free(&g_agree);
}

int report_error(const std::string& what, int code) {
  stop_startup_watchdog(/*whole_job=*/true);  // this error's line, not the watchdog's; the job ends
  int initialized = 0, finalized = 0, size = 1, rank = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  const bool mpi = initialized && !finalized;
  if (mpi) {
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  }
  if (!mpi || size == 1) {
    print_line(what);
    return code;
  }
  if (g_agree != MPI_COMM_NULL) {
    // every rank's (cause, code) as a hash; equal everywhere = one error of the whole job
    const uint64_t mine = std::hash<std::string>{}(what) ^ (static_cast<uint64_t>(code) << 56);
    std::vector<uint64_t> all(static_cast<size_t>(size));
    MPI_Request req = MPI_REQUEST_NULL;
    bool agreed = false;
    if (MPI_Iallgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, g_agree, &req) == MPI_SUCCESS &&
        wait_for(req, kAgreeSeconds)) {
      agreed = true;
      for (uint64_t h : all) agreed = agreed && h == mine;
    }
    if (agreed && rank != 0) {
      // rank 0 prints and aborts the job, which ends this process; should it not, say it here
      std::this_thread::sleep_for(std::chrono::seconds(30));
      print_line(what);
      std::_Exit(code);
    }
    if (!agreed && req == MPI_REQUEST_NULL) {
      // every rank failed, with different causes: each prints its own, all before the abort
      print_line(what);
      MPI_Request printed = MPI_REQUEST_NULL;
      if (MPI_Ibarrier(g_agree, &printed) == MPI_SUCCESS) wait_for(printed, kAgreeSeconds);
      MPI_Abort(MPI_COMM_WORLD, code);
      return code;
    }
  }
  print_line(what);
  MPI_Abort(MPI_COMM_WORLD, code);
  return code;
}

int report_deadline(const comm::DeadlineError& e) {
  stop_startup_watchdog(/*whole_job=*/true);
  int initialized = 0, finalized = 0, size = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size == 1) return report_error(e.what(), 1);
  if (!e.reports_here()) comm::run_poll_hooks_for(e.grace());  // the reporter's MPI_Abort ends this
  print_line(e.what());
  MPI_Abort(MPI_COMM_WORLD, 1);
  return 1;
}

}  // namespace st::launch
