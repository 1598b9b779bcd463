// The NCCL backend's entry points, implemented by comm/nccl (built with NCCL) or comm/nccl_stub
// (every other build: no GPUs usable, creation throws DeviceError). CMake picks the sources.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace st::comm {

// True when this build has the NCCL backend.
bool nccl_built();
// CUDA devices this process can see (0 without the NCCL backend or without a driver).
int nccl_visible_devices();
// Collective over `parent`: makes `device` current, broadcasts rank 0's ncclUniqueId over MPI and
// initialises a non-blocking NCCL communicator, all within `timeout`.
std::shared_ptr<Communicator> create_nccl_communicator(MPI_Comm parent, int device, const std::string& name,
                                                       Millis timeout, const CommOptions& options = {});

}  // namespace st::comm
