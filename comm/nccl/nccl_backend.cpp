// NCCL backend entry points (see comm/nccl_backend.h): device count, readiness polling, and
// communicator creation with rank 0's ncclUniqueId broadcast over MPI.
#include <chrono>
#include <thread>

#include "comm/keep_alive.h"
#include "comm/mpi_wait.h"
#include "comm/nccl/nccl_check.h"
#include "comm/nccl/nccl_communicator.h"
#include "comm/nccl_backend.h"
#include "tensor/cuda/runtime.h"

namespace st::comm {

bool nccl_built() { return true; }

int nccl_visible_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

void nccl_wait_ready(ncclComm_t comm, Millis timeout, const std::string& what) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + timeout;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    CHECK_NCCL(ncclCommGetAsyncError(comm, &state));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress)
      ST_THROW(CommError, "comm error: " << what << ": NCCL " << ncclGetErrorString(state) << ": "
                                         << ncclGetLastError(comm));
    if (clock::now() >= deadline)
      ST_THROW(TimeoutError, "comm timeout: " << what << " did not complete within "
                                              << std::chrono::duration<double>(timeout).count() << " s");
    std::this_thread::yield();
  }
}

bool nccl_ready_now(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  return ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclSuccess;
}

std::shared_ptr<Communicator> create_nccl_communicator(MPI_Comm parent, int device, const std::string& name,
                                                       Millis timeout, const CommOptions& options) {
  require_mpi("create_nccl_communicator");
  int visible = nccl_visible_devices();
  ST_CHECK(device >= 0 && device < visible, DeviceError,
           "NCCL communicator '" << name << "': device " << device << " is not one of the " << visible
                                 << " visible CUDA devices");
  const std::string what = "creating communicator '" + name + "' (MPI_Comm_idup)";
  MPI_Comm mpi = MPI_COMM_NULL;
  MPI_Request req;
  {
    ErrorsReturnScope errors(parent);  // the caller's communicator, e.g. MPI_COMM_WORLD
    CHECK_MPI(MPI_Comm_idup(parent, &mpi, &req), what);
  }
  mpi_wait_deadline(&req, timeout, what);
  mpi_errors_return(mpi, what);
  int rank = 0, size = 0;
  CHECK_MPI(MPI_Comm_rank(mpi, &rank), what);
  CHECK_MPI(MPI_Comm_size(mpi, &size), what);

  ::st::cuda::set_device(device);
  auto id = std::make_shared<ncclUniqueId>();
  if (rank == 0) CHECK_NCCL(ncclGetUniqueId(id.get()));
  CHECK_MPI(MPI_Ibcast(id.get(), sizeof(ncclUniqueId), MPI_BYTE, 0, mpi, &req),
            "rank " + std::to_string(rank) + " of group '" + name + "', ncclUniqueId broadcast");
  try {
    mpi_wait_deadline(&req, timeout, "rank " + std::to_string(rank) + " of group '" + name + "', ncclUniqueId broadcast");
  } catch (const TimeoutError&) {
    keep_alive_forever(id);
    throw;
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // lets ncclCommAbort cancel a hung operation
  ncclComm_t comm = nullptr;
  CHECK_NCCL(ncclCommInitRankConfig(&comm, size, *id, rank, &config));
  try {
    nccl_wait_ready(comm, timeout, "rank " + std::to_string(rank) + " of group '" + name + "', ncclCommInitRankConfig");
  } catch (const CommError&) {
    ncclCommAbort(comm);
    throw;
  }
  return std::make_shared<NcclCommunicator>(comm, mpi, device, name, timeout, options);
}

}  // namespace st::comm
