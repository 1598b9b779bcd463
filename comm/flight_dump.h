// The flight recorder as files: one JSON object per rank (comm/flight_report.h's report_json),
// flight_recorder_rank<R>.json for world rank R, written whole (a temporary file renamed), so a
// reader never sees half of one. `shardtrain train --flight-recorder-dump DIR` has the deadline
// write them (CommOptions::flight_recorder_dump); a program can call dump_flight_recorder itself.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "comm/flight_report.h"

namespace st::comm {

// This rank's report — every live communicator's ring, what it waits on — into `dir` (created
// when missing) as flight_recorder_rank<R>.json; returns the file's path. Throws IOError.
std::string dump_flight_recorder(const std::string& dir);

// Each report present in `reports` (index = world rank) into `dir`, as above. Throws IOError.
void dump_reports(const std::string& dir, const std::vector<std::optional<RankReport>>& reports, int me);

}  // namespace st::comm
