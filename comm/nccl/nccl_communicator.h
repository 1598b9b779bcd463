// NCCL backend: CUDA tensors, one communication stream per communicator. Each operation waits
// (cudaStreamWaitEvent) for an event recorded on the caller's compute stream, runs on the comm
// stream, and records a completion event; Work::wait polls cudaEventQuery and
// ncclCommGetAsyncError against the deadline. Once the host has seen the event complete, work the
// caller enqueues afterwards, on any stream, runs after the operation: no stream wait is needed.
// Work::wait_on_stream instead makes the caller's current stream wait for that event
// (cudaStreamWaitEvent) and returns at once; the host sees the completion at a later wait.
// No event is created per call: the "ready" event is one per communicator (re-recorded each time;
// cudaStreamWaitEvent captures the record when called) and completion events come from an
// EventPool (comm/nccl/event_pool.h), each returned when its Work finished.
// The NCCL communicator is non-blocking (config.blocking = 0) so that ncclCommAbort, run by the
// watchdog on a timeout or an asynchronous error, can cancel operations in flight. A private MPI
// communicator over the same ranks carries the unique id, split agreement, debug signatures and
// the point-to-point envelopes that check tags against NCCL's issue order (comm/nccl/envelopes.h);
// a second duplicate is the side channel that names a missing rank after a timeout
// (comm/side_channel.h).
#pragma once
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace st::comm {

class NcclWork;
class EnvelopeBatch;

class NcclCommunicator final : public Communicator {
 public:
  // Adopts both communicators; `nccl` must be initialised (not in progress). Collective over
  // `mpi` (the side channel is a duplicate, within `timeout`).
  NcclCommunicator(ncclComm_t nccl, MPI_Comm mpi, int device, const std::string& name, Millis timeout,
                   const CommOptions& options = {});
  ~NcclCommunicator() override;

  const char* backend() const override { return "nccl"; }
  bool progresses_on_its_own() const override { return true; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

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
  friend class NcclWork;  // holds the Handle
  // Orders the comm stream after the compute stream, runs `enqueue()` (NCCL calls on stream_),
  // records a completion event and wraps it in a Work holding `keep` alive (and checking `env`,
  // the envelopes of a batch_p2p). Defined and used only in nccl_communicator.cpp (a template: no
  // std::function allocation per call).
  template <class Enqueue>
  WorkPtr launch(const char* op, uint64_t seq, std::vector<Tensor> keep, const Enqueue& enqueue,
                 std::shared_ptr<EnvelopeBatch> env = nullptr);
  void require_cuda(const Tensor& t, const char* op) const;

  struct Handle;  // the ncclComm_t and the event pool, shared with Works and the abort hook
  std::shared_ptr<Handle> h_;
  MPI_Comm mpi_;
  int device_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;  // recorded on the caller's stream before each operation
  Tensor barrier_buf_;  // (1) i32 on the device
  std::vector<uint64_t> env_sent_, env_received_;  // per group rank: envelopes numbered so far
};

}  // namespace st::comm
