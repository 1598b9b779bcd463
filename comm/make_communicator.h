// make_communicator: the world communicator for `--comm auto|nccl|mpi`, the node-local rank, and
// this rank's GPU, with a one-line reason for the log.
//
// auto picks NCCL when every rank owns a GPU — NCCL is built and, on every node, the ranks there
// are no more than the visible devices (agreed across the world, so all ranks pick the same
// backend) — else MPI (CUDA tensors then travel through host memory, so ranks may share a GPU).
// The local rank comes from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED); OMPI_COMM_WORLD_LOCAL_RANK
// and SLURM_LOCALID are read as hints and any disagreement is reported in the reason.
// Local GPU = local rank (NCCL) or local rank mod visible devices (MPI), -1 without GPUs.
// The world communicator gets `options` (split groups inherit them) and, with
// options.diagnose_deadlines, the deadline diagnosis of comm/deadline_gather.h.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace st::comm {

struct NodeLocal {
  int rank = 0;
  int size = 1;
  std::string note;  // how it was found; hints that disagree
};
// Collective over `parent` (within `timeout`).
NodeLocal node_local_rank(MPI_Comm parent, Millis timeout);

struct BackendDecision {
  bool nccl = false;
  std::string reason;
};
// Pure decision (tested without ranks): `kind` is auto|nccl|mpi; `all_nodes_ok` says whether
// every node has at least as many visible GPUs as ranks. Throws ValueError for an unknown kind
// and DeviceError when nccl is forced but impossible.
BackendDecision decide_backend(const std::string& kind, bool nccl_built, int local_gpus, int local_size,
                               bool all_nodes_ok);

struct CommSetup {
  std::shared_ptr<Communicator> world;
  std::string backend;  // "mpi" | "nccl"
  std::string reason;   // one line for the log, e.g. "auto -> mpi: 4 ranks on this node share 1 GPU(s)"
                        // (MPI with GPUs visible: then how CUDA tensors reach MPI, comm/mpi/cuda_aware.h)
  NodeLocal local;
  int device = -1;  // this rank's CUDA device, -1 if none
};
// Collective over `parent` (every rank calls it with the same kind and options).
CommSetup make_communicator(const std::string& kind, Millis timeout, const CommOptions& options = {},
                            MPI_Comm parent = MPI_COMM_WORLD);

}  // namespace st::comm
