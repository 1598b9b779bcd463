// CommOptions: every setting of a communicator, as typed data. make_communicator and the backends'
// constructors take it, split children inherit it, and nothing in comm/ reads the environment:
// launch/comm_env.h fills these fields from SHARDTRAIN_COMM_DEBUG, SHARDTRAIN_P2P,
// SHARDTRAIN_COMM_MAX_COUNT and SHARDTRAIN_MPI_CUDA_AWARE (docs/testing.md), and tests set them
// directly. The parsers below turn those variables' text into fields (one definition of what
// each accepts); validate() checks the fields however they were set.
#pragma once
#include <climits>
#include <cstdint>
#include <string>

namespace st::comm {

// Point-to-point semantics of the MPI backend (comm/README.md, "Point to point"). standard: MPI's
// (buffered sends, match by (peer, tag)); strict: NCCL's (synchronous sends, batches in issue
// order, tags checked). The NCCL backend always behaves as strict.
enum class P2PMode : uint8_t { standard, strict };
const char* p2p_mode_name(P2PMode m);  // "default" | "strict"

// How the MPI backend hands CUDA tensors to MPI (comm/mpi/cuda_aware.h): ask the library
// (MPIX_Query_cuda_support), or forced off (pinned host staging) / on (device pointers).
enum class CudaAwareMode : uint8_t { ask, off, on };

struct CommOptions {
  // Debug mode: every collective first compares its signature across the group (comm/README.md).
  bool debug = false;
  P2PMode p2p = P2PMode::standard;
  // Elements per backend call, in [1, 2^31-1] (MPI's int counts); larger operations are split.
  // Must be the same on every rank of a group.
  int64_t max_count = INT_MAX;
  CudaAwareMode mpi_cuda_aware = CudaAwareMode::ask;
  // The flight recorder (comm/flight_recorder.h): each communicator keeps its last this many
  // operations; 0 keeps none.
  int64_t flight_recorder_entries = 256;
  // On a deadline, each rank's rings as JSON in this directory (comm/flight_dump.h); "": none.
  std::string flight_recorder_dump;
  // The world communicator make_communicator returns (and its splits) diagnoses a deadline from
  // every rank's rings (comm/deadline_diagnosis.h); false: the timed-out operation's line only.
  bool diagnose_deadlines = true;

  // Throws ValueError naming the field when one is out of range.
  void validate() const;
};

// The text forms, e.g. an environment variable's value; `source` names where the text came from
// (e.g. "SHARDTRAIN_P2P") in the ValueError a bad text throws. Empty text means the default.
bool parse_comm_debug(const std::string& text, const std::string& source);          // "" | "0": off; else on
P2PMode parse_p2p_mode(const std::string& text, const std::string& source);         // "" | default | strict
int64_t parse_max_count(const std::string& text, const std::string& source);        // integer in [1, 2^31-1]
CudaAwareMode parse_cuda_aware(const std::string& text, const std::string& source);  // "" (ask) | 0 | 1

}  // namespace st::comm
