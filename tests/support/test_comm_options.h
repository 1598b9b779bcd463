// The communicator options of a test binary: st_add_mpi_test's _strict registrations
// (tests/CMakeLists.txt) run a whole binary a second time with SHARDTRAIN_P2P=strict in its
// environment. comm/ reads no variable (comm/comm_options.h), so a test's communicators take
// their p2p mode from here — through comm's own parser, the one launch/comm_env.h uses.
#pragma once
#include <cstdlib>

#include "comm/comm_options.h"

namespace st::testing_support {

inline comm::CommOptions test_comm_options() {
  comm::CommOptions o;
  const char* v = std::getenv("SHARDTRAIN_P2P");
  o.p2p = comm::parse_p2p_mode(v ? v : "", "SHARDTRAIN_P2P");
  return o;
}

}  // namespace st::testing_support
