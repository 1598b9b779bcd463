// RankReport: what one rank tells the others about itself at a deadline — what it waits on now
// (or timed out in), and for every communicator it holds: the group's name and members (world
// ranks), what it issued there (collectives, batch_p2p calls, sends to / receives from each
// member) and the flight recorder's ring. Built from the process's live communicators
// (comm/comm_state.h), sent over the world's side channel as bytes (encode / decode: ranks of
// one job run the same build), diagnosed by comm/deadline_diagnosis.h and written as JSON by
// comm/flight_dump.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/flight_recorder.h"
#include "comm/wait_state.h"

namespace st::comm {

struct GroupReport {
  std::string name;
  std::vector<int> members;  // world ranks, by group rank
  int rank = 0;              // this rank's group rank
  uint64_t collectives = 0;  // collectives issued (the next one's seq)
  uint64_t p2p = 0;          // batch_p2p calls issued
  std::vector<uint64_t> sends_to, recvs_from;  // per group rank: transfers issued
  bool broken = false;
  std::vector<FlightEntry> entries;  // the ring, oldest first
  // "name [0,2]": how the ranks of a job tell their copies of one group apart from others.
  std::string key() const;
};

struct RankReport {
  int world_rank = -1;
  std::string host;
  int64_t pid = 0;
  int64_t now_ns = 0;  // the rank's steady clock when it made the report
  WaitSnapshot wait;
  std::vector<GroupReport> groups;
  // The group whose key() is `key`, or nullptr.
  const GroupReport* group(const std::string& key) const;
};

// "name [0,2]" for a group and its members' world ranks.
std::string group_key(const std::string& name, const std::vector<int>& members);

// This process's report: every live communicator that has its members' world ranks, and this
// thread's wait (else the last timeout).
RankReport build_rank_report(int world_rank);

std::string encode_report(const RankReport& r);
// Throws CommError for bytes that are not an encoded report.
RankReport decode_report(const std::string& bytes);

// The report as one JSON object (its fields as above; times in steady-clock nanoseconds).
std::string report_json(const RankReport& r);

}  // namespace st::comm
