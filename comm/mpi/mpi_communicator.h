// MPI backend: nonblocking MPI collectives (MPI_Iallreduce, ...) on host memory, Works that poll
// MPI_Testall against a deadline. CPU tensors are used in place; CUDA tensors are staged through
// host copies (so several ranks may share one GPU); f16 / bf16 reductions accumulate in f32.
// Each communicator owns a private MPI_Comm (a dup or split), with MPI_ERRORS_RETURN so MPI
// failures become CommError instead of aborting the job.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace st::comm {

class MpiCommunicator final : public Communicator {
 public:
  // Adopts `comm` (freed in the destructor unless the communicator broke).
  MpiCommunicator(MPI_Comm comm, const std::string& name, Millis timeout);
  ~MpiCommunicator() override;
  // A communicator over a private duplicate of `parent` (MPI_Comm_idup, within `timeout`).
  static std::shared_ptr<MpiCommunicator> dup(MPI_Comm parent, const std::string& name, Millis timeout);

  const char* backend() const override { return "mpi"; }
  MPI_Comm mpi_comm() const { return comm_; }

 protected:
  std::vector<CollectiveSignature> exchange_signatures(const CollectiveSignature& mine) override;
  WorkPtr do_all_reduce(const Tensor& in, const Tensor& out, ReduceOp op, uint64_t seq) override;
  WorkPtr do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, uint64_t seq) override;
  WorkPtr do_all_gather(const Tensor& in, const Tensor& out, uint64_t seq) override;
  WorkPtr do_broadcast(const Tensor& t, int root, uint64_t seq) override;
  WorkPtr do_barrier(uint64_t seq) override;
  std::shared_ptr<Communicator> do_split(int color, int key, const std::string& name) override;
  WorkPtr do_batch_p2p(const std::vector<P2POp>& ops, const std::string& op_name, uint64_t seq) override;

 private:
  MPI_Comm comm_;
};

}  // namespace st::comm
