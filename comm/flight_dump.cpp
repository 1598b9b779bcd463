// Writing reports as JSON files (see flight_dump.h).
#include "comm/flight_dump.h"

#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tensor/error.h"

namespace st::comm {
namespace fs = std::filesystem;
namespace {

std::string write_one(const std::string& dir, const RankReport& r, int writer) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  ST_CHECK(!ec, IOError, "flight recorder dump: cannot create " << dir << ": " << ec.message());
  const std::string path = (fs::path(dir) / ("flight_recorder_rank" + std::to_string(r.world_rank) + ".json")).string();
  const std::string tmp = path + ".tmp-" + std::to_string(writer) + "-" + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    ST_CHECK(out.good(), IOError, "flight recorder dump: cannot write " << tmp);
    out << report_json(r);
    ST_CHECK(out.good(), IOError, "flight recorder dump: writing " << tmp << " failed");
  }
  fs::rename(tmp, path, ec);
  ST_CHECK(!ec, IOError, "flight recorder dump: cannot rename " << tmp << " to " << path << ": " << ec.message());
  return path;
}

}  // namespace

std::string dump_flight_recorder(const std::string& dir) {
  int me = 0, init = 0;
  MPI_Initialized(&init);
  if (init) MPI_Comm_rank(MPI_COMM_WORLD, &me);
  return write_one(dir, build_rank_report(me), me);
}

void dump_reports(const std::string& dir, const std::vector<std::optional<RankReport>>& reports, int me) {
  for (const auto& r : reports)
    if (r) write_one(dir, *r, me);
}

}  // namespace st::comm
