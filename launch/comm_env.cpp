// Communicator options from the environment (see comm_env.h).
#include "launch/comm_env.h"

#include <cstdlib>
#include <string>

namespace st::launch {

comm::CommOptions comm_options_from(const std::function<const char*(const char*)>& lookup) {
  auto text = [&](const char* var) {
    const char* v = lookup(var);
    return std::string(v ? v : "");
  };
  comm::CommOptions o;
  o.debug = comm::parse_comm_debug(text("SHARDTRAIN_COMM_DEBUG"), "SHARDTRAIN_COMM_DEBUG");
  o.p2p = comm::parse_p2p_mode(text("SHARDTRAIN_P2P"), "SHARDTRAIN_P2P");
  o.max_count = comm::parse_max_count(text("SHARDTRAIN_COMM_MAX_COUNT"), "SHARDTRAIN_COMM_MAX_COUNT");
  o.mpi_cuda_aware = comm::parse_cuda_aware(text("SHARDTRAIN_MPI_CUDA_AWARE"), "SHARDTRAIN_MPI_CUDA_AWARE");
  o.validate();
  return o;
}

comm::CommOptions comm_options_from_env() {
  return comm_options_from([](const char* var) { return std::getenv(var); });
}

}  // namespace st::launch
