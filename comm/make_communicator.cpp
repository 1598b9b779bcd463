// Backend choice and node-local rank (see make_communicator.h).
#include "comm/make_communicator.h"

#include <cstdlib>
#include <sstream>

#include "comm/deadline_gather.h"
#include "comm/mpi/cuda_aware.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi_wait.h"
#include "comm/nccl_backend.h"

namespace st::comm {

NodeLocal node_local_rank(MPI_Comm parent, Millis timeout) {
  require_mpi("node_local_rank");
  const std::string what = "node-local rank discovery";
  ErrorsReturnScope errors(parent);  // the caller's communicator, e.g. MPI_COMM_WORLD
  mpi_agree(parent, timeout, what);
  MPI_Comm node = MPI_COMM_NULL;
  CHECK_MPI(MPI_Comm_split_type(parent, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), what);
  mpi_errors_return(node, what);
  NodeLocal nl;
  CHECK_MPI(MPI_Comm_rank(node, &nl.rank), what);
  CHECK_MPI(MPI_Comm_size(node, &nl.size), what);
  CHECK_MPI(MPI_Comm_free(&node), what);
  std::ostringstream note;
  note << "local rank " << nl.rank << " of " << nl.size << " (MPI shared-memory split)";
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    const char* v = std::getenv(var);
    if (v && *v && std::atoi(v) != nl.rank) note << "; hint " << var << "=" << v << " disagrees";
  }
  nl.note = note.str();
  return nl;
}

BackendDecision decide_backend(const std::string& kind, bool nccl_built, int local_gpus, int local_size,
                               bool all_nodes_ok) {
  ST_CHECK(kind == "auto" || kind == "nccl" || kind == "mpi", ValueError,
           "--comm must be auto, nccl or mpi, got '" << kind << "'");
  if (kind == "mpi") return {false, "mpi: requested (--comm mpi)"};
  std::ostringstream why;
  bool ok = nccl_built && all_nodes_ok && local_gpus >= local_size && local_gpus > 0;
  if (!nccl_built)
    why << "this build has no NCCL";
  else if (local_gpus == 0)
    why << "no CUDA device is visible";
  else if (local_gpus < local_size)
    why << local_size << " ranks on this node share " << local_gpus << " visible GPU(s)";
  else if (!all_nodes_ok)
    why << "another node has fewer visible GPUs than ranks";
  else
    why << "every rank owns a GPU (" << local_size << " rank(s), " << local_gpus << " visible GPU(s) on this node)";
  if (kind == "nccl") {
    ST_CHECK(ok, DeviceError, "--comm nccl: " << why.str());
    return {true, "nccl: requested (--comm nccl); " + why.str()};
  }
  return {ok, std::string("auto -> ") + (ok ? "nccl: " : "mpi: ") + why.str()};
}

CommSetup make_communicator(const std::string& kind, Millis timeout, const CommOptions& options, MPI_Comm parent) {
  require_mpi("make_communicator");
  options.validate();
  CommSetup s;
  s.local = node_local_rank(parent, timeout);
  const int gpus = nccl_visible_devices();
  const bool here_ok = nccl_built() && gpus > 0 && gpus >= s.local.size;
  // Agree across the world, so that every rank picks the same backend.
  std::vector<int64_t> all;
  {
    ErrorsReturnScope errors(parent);
    all = mpi_allgather_i64(parent, {here_ok ? 1 : 0}, timeout, "backend agreement");
  }
  bool all_ok = true;
  for (int64_t v : all) all_ok = all_ok && v == 1;
  BackendDecision d = decide_backend(kind, nccl_built(), gpus, s.local.size, all_ok);
  s.reason = d.reason + "; " + s.local.note;
  if (d.nccl) {
    s.device = s.local.rank;
    s.world = create_nccl_communicator(parent, s.device, "world", timeout, options);
    s.backend = "nccl";
  } else {
    s.device = gpus > 0 ? s.local.rank % gpus : -1;
    s.world = MpiCommunicator::dup(parent, "world", timeout, options);
    s.backend = "mpi";
    if (gpus > 0) s.reason += "; " + mpi::cuda_path(options.mpi_cuda_aware).note;  // how CUDA tensors reach MPI
  }
  if (options.diagnose_deadlines)
    s.world->set_deadline_diagnoser(std::make_shared<DeadlineGather>(s.world->shared_state(), options));
  return s;
}

}  // namespace st::comm
