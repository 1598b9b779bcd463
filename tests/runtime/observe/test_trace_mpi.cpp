// runtime/observe/trace under mpirun: every rank records events, trace::finish() with an MPI barrier
// gathers them through part files, rank 0 writes one JSON with a pid per rank and all events.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/observe/trace.h"

namespace tr = st::runtime::trace;

TEST(TraceMpi, FinishMergesEveryRank) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  // One path for all ranks: rank 0's pid decides it.
  int pid = static_cast<int>(::getpid());
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string path = (std::filesystem::temp_directory_path() / ("st_trace_mpi_" + std::to_string(pid)) / "t.json").string();

  tr::start(rank);
  for (int mb = 0; mb <= rank; ++mb) {  // rank r records r + 1 forward events
    tr::Scope s("forward", "compute", mb);
  }
  { tr::Scope s("allreduce", "comm"); MPI_Barrier(MPI_COMM_WORLD); }
  tr::finish(path, rank, world, [] { MPI_Barrier(MPI_COMM_WORLD); });
  EXPECT_FALSE(tr::enabled());

  if (rank == 0) {
    std::ifstream f(path);
    nlohmann::json doc = nlohmann::json::parse(f);
    std::map<int, int> forwards, comms;
    std::set<int> named;
    for (const auto& e : doc.at("traceEvents")) {
      if (e.at("ph") == "X" && e.at("cat") == "compute") ++forwards[e.at("pid").get<int>()];
      if (e.at("ph") == "X" && e.at("cat") == "comm") ++comms[e.at("pid").get<int>()];
      if (e.at("ph") == "M" && e.at("name") == "process_name") named.insert(e.at("pid").get<int>());
    }
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(forwards[r], r + 1) << "rank " << r;
      EXPECT_EQ(comms[r], 1) << "rank " << r;
      EXPECT_TRUE(named.count(r)) << "rank " << r;
    }
    EXPECT_EQ(static_cast<int>(named.size()), world);
    for (int r = 0; r < world; ++r) EXPECT_FALSE(std::filesystem::exists(tr::part_path(path, r)));
    std::filesystem::remove_all(std::filesystem::path(path).parent_path());
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = RUN_ALL_TESTS();
  int all = 0;
  MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return all;
}
