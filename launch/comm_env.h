// The communicator options (comm/comm_options.h) from the environment: the CLI is where variables
// are read, never comm/. Each keeps the meaning docs/testing.md gives it:
//   SHARDTRAIN_COMM_DEBUG=1          CommOptions::debug (anything but empty or 0)
//   SHARDTRAIN_P2P=default|strict    CommOptions::p2p
//   SHARDTRAIN_COMM_MAX_COUNT=n      CommOptions::max_count
//   SHARDTRAIN_MPI_CUDA_AWARE=0|1    CommOptions::mpi_cuda_aware (unset: ask the library)
// A bad value is a ValueError naming the variable.
#pragma once
#include <functional>

#include "comm/comm_options.h"

namespace st::launch {

// From this process's environment.
comm::CommOptions comm_options_from_env();
// From `lookup` (a variable's value, nullptr when unset): the same rules, testable without setenv.
comm::CommOptions comm_options_from(const std::function<const char*(const char*)>& lookup);

}  // namespace st::launch
