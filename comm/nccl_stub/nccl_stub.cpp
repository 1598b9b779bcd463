// Builds without NCCL: the NCCL backend is absent and says so when asked for.
#include "comm/nccl_backend.h"

namespace st::comm {

bool nccl_built() { return false; }
int nccl_visible_devices() { return 0; }

std::shared_ptr<Communicator> create_nccl_communicator(MPI_Comm, int, const std::string& name, Millis,
                                                       const CommOptions&) {
  ST_THROW(DeviceError, "NCCL communicator '" << name
                                              << "': this shardtrain was built without NCCL (use --comm mpi; CUDA "
                                                 "tensors then travel through host memory)");
}

}  // namespace st::comm
