// MPI backend: nonblocking MPI collectives (MPI_Iallreduce, MPI_Ireduce, ...), Works that poll
// MPI_Testall against a deadline. CPU tensors are used in place; CUDA tensors go to MPI as device
// pointers when the library is CUDA-aware (comm/mpi/cuda_aware.h), else through a per-communicator
// pool of pinned host blocks (comm/mpi/host_stage.h) — so several ranks may share one GPU either
// way; f16 / bf16 reductions accumulate in f32 on the host. Operations reach MPI through a
// PostQueue (comm/mpi/post_queue.h): in issue order, once their staged inputs are on the host, so
// staging makes the host wait at launch for nothing. Nothing progresses without polls
// (progresses_on_its_own() is false).
// Each communicator owns a private MPI_Comm (a dup or split), with MPI_ERRORS_RETURN so MPI
// failures become CommError instead of aborting the job, and a side channel (a second dup,
// comm/side_channel.h) that names the rank a timed-out operation waited for. Point-to-point
// transfers go through a P2PQueue (comm/mpi/p2p_queue.h): default or strict mode (CommOptions::p2p).
#pragma once
#include <mpi.h>

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/mpi/host_stage.h"
#include "comm/mpi/p2p_queue.h"
#include "comm/mpi/post_queue.h"

namespace st::comm {

class MpiCommunicator final : public Communicator {
 public:
  // Adopts `comm` (freed in the destructor unless the communicator broke); collective over it (the
  // side channel is a duplicate, within `timeout`).
  MpiCommunicator(MPI_Comm comm, const std::string& name, Millis timeout, const CommOptions& options = {});
  ~MpiCommunicator() override;
  // A communicator over a private duplicate of `parent` (MPI_Comm_idup, within `timeout`).
  static std::shared_ptr<MpiCommunicator> dup(MPI_Comm parent, const std::string& name, Millis timeout,
                                              const CommOptions& options = {});

  const char* backend() const override { return "mpi"; }
  bool progresses_on_its_own() const override { return false; }
  MPI_Comm mpi_comm() const { return comm_; }
  // CUDA tensors: device pointers to MPI (true) or pinned host staging (false).
  bool cuda_aware() const { return stage_.cuda_aware(); }
  // Staging blocks this communicator allocated so far, and their bytes (for tests: flat in the
  // steady state).
  uint64_t staging_allocations() const { return stage_.pool().allocations(); }
  size_t staging_bytes() const { return stage_.pool().bytes_held(); }

 protected:
  std::vector<CollectiveSignature> exchange_signatures(const CollectiveSignature& mine) override;
  WorkPtr do_all_reduce(const Tensor& in, const Tensor& out, ReduceOp op, uint64_t seq) override;
  WorkPtr do_reduce(const Tensor& in, const Tensor& out, int root, ReduceOp op, uint64_t seq) override;
  WorkPtr do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, uint64_t seq) override;
  WorkPtr do_all_gather(const Tensor& in, const Tensor& out, uint64_t seq) override;
  WorkPtr do_broadcast(const Tensor& t, int root, uint64_t seq) override;
  WorkPtr do_barrier(uint64_t seq) override;
  std::shared_ptr<Communicator> do_split(int color, int key, const std::string& name) override;
  WorkPtr do_batch_p2p(const std::vector<P2POp>& ops, const std::string& op_name, uint64_t seq) override;

 private:
  // "rank 1 of 4 in group 'world', op allreduce, seq 7" (for MPI errors before a Work exists)
  std::string describe(const std::string& op, uint64_t seq) const;
  MPI_Comm comm_;
  mpi::HostStage stage_;
  std::shared_ptr<mpi::PostQueue> posts_;  // every operation, in issue order, until posted
  std::shared_ptr<mpi::P2PQueue> p2p_;
};

}  // namespace st::comm
