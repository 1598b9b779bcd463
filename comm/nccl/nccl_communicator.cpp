// NCCL backend (see nccl_communicator.h). Buffers: every op reads and writes the tensors' device
// memory directly; in-place variants pass aliasing pointers exactly as NCCL documents them
// (allgather: send = recv + rank·n; reduce-scatter: recv = send + rank·n; reduce on the root:
// send = recv).
#include "comm/nccl/nccl_communicator.h"

#include <atomic>
#include <memory>

#include "comm/keep_alive.h"
#include "comm/mpi_wait.h"
#include "comm/nccl/envelopes.h"
#include "comm/nccl/event_pool.h"
#include "comm/nccl/nccl_check.h"
#include "comm/side_channel.h"
#include "tensor/cuda/runtime.h"

namespace st::comm {

struct NcclCommunicator::Handle {
  ncclComm_t comm = nullptr;
  std::atomic<bool> aborted{false};    // comm aborted or destroyed: never call NCCL on it again
  std::atomic<bool> finalized{false};  // destroyed after ncclCommFinalize completed
  EventPool events;  // completion events (outlives the communicator while a Work holds it)
  void abort() {
    bool expected = false;
    if (aborted.compare_exchange_strong(expected, true)) ncclCommAbort(comm);
  }
};

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::f8e4m3:
    case DType::f8e5m2: break;  // fp8 tensors are not communicated (yet)
  }
  ST_THROW(DTypeError, "NCCL: unsupported dtype " << dtype_name(t));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
  }
  return ncclSum;
}

}  // namespace

// Not in the anonymous namespace: a friend of NcclCommunicator (it holds the Handle).
class NcclWork final : public Work {
 public:
  using Handle = NcclCommunicator::Handle;
  NcclWork(std::shared_ptr<CommState> state, const char* op, uint64_t seq, std::shared_ptr<Handle> h,
           cudaEvent_t done, std::vector<Tensor> keep, std::shared_ptr<EnvelopeBatch> env)
      : Work(std::move(state), op, seq), h_(std::move(h)), done_(done), keep_(std::move(keep)), env_(std::move(env)) {}
  ~NcclWork() override {
    settle();
    // Still set only if the operation never finished: the event may be pending, so it is
    // destroyed (CUDA releases it once complete), never reused.
    if (done_) cudaEventDestroy(done_);
  }

 protected:
  bool poll() override {
    // Envelopes first: a mismatch is reported (and NCCL aborted) even while NCCL still waits.
    bool envelopes = true;
    if (env_) {
      try {
        envelopes = env_->poll();
      } catch (const CommError& e) {
        state()->mark_broken(e.what());  // aborts the NCCL communicator
        throw;
      }
    }
    cudaError_t q = cudaEventQuery(done_);
    if (q != cudaErrorNotReady) CHECK_CUDA(q);
    if (h_->aborted.load()) {  // the NCCL communicator is gone: no NCCL call on it any more
      if (h_->finalized.load()) return q == cudaSuccess && envelopes;  // ncclCommFinalize flushed every operation
      std::string msg = "comm error: " + describe() + ": the NCCL communicator was aborted";
      state()->mark_broken(msg);
      throw CommError(msg);
    }
    // After the query: an aborted communicator's kernels end early and complete the event too,
    // so "complete" counts only when no asynchronous error was raised by then.
    ncclResult_t async = ncclSuccess;
    ncclResult_t rc = ncclCommGetAsyncError(h_->comm, &async);
    if (rc != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
      ncclResult_t bad = rc != ncclSuccess ? rc : async;
      std::string msg = "comm error: " + describe() + ": NCCL " + ncclGetErrorString(bad) + ": " +
                        ncclGetLastError(h_->comm);
      state()->mark_broken(msg);  // aborts the NCCL communicator
      throw CommError(msg);
    }
    return q == cudaSuccess && envelopes;
  }
  void finish() override {
    // Runs only after the host saw the event complete (poll): every kernel enqueued from now on,
    // on any stream, runs after the operation and sees its results, so the caller's stream needs
    // no cudaStreamWaitEvent. Nothing can observe the event any more: it may be re-recorded.
    h_->events.put(done_);
    done_ = nullptr;
    keep_.clear();
    env_.reset();
  }
  bool stream_wait() override {
    // The wait captures the event's current record: the event may go back to the pool (finish)
    // and be re-recorded later without affecting it. An aborted communicator's event completes
    // too; the error surfaces at the next wait() or is_completed().
    if (h_->aborted.load()) return false;
    CHECK_CUDA(cudaStreamWaitEvent(::st::cuda::current_stream(), done_, 0));
    return true;
  }
  void abandon() override {
    keep_alive_forever(std::make_shared<std::vector<Tensor>>(std::move(keep_)));
    if (env_) keep_alive_forever(std::move(env_));  // its MPI requests may still be posted
  }

 private:
  std::shared_ptr<Handle> h_;
  cudaEvent_t done_;
  std::vector<Tensor> keep_;
  std::shared_ptr<EnvelopeBatch> env_;  // batch_p2p only
};

NcclCommunicator::NcclCommunicator(ncclComm_t nccl, MPI_Comm mpi, int device, const std::string& name, Millis timeout,
                                   const CommOptions& options)
    : Communicator(std::make_shared<CommState>(
          [&] {
            int r = 0;
            CHECK_NCCL(ncclCommUserRank(nccl, &r));
            return r;
          }(),
          [&] {
            int s = 0;
            CHECK_NCCL(ncclCommCount(nccl, &s));
            return s;
          }(),
          name, timeout), options),
      h_(std::make_shared<Handle>()),
      mpi_(mpi),
      device_(device) {
  h_->comm = nccl;
  std::shared_ptr<Handle> h = h_;
  state()->set_abort_hook([h] { h->abort(); });
  mpi_errors_return(mpi_, state()->where());
  env_sent_.assign(static_cast<size_t>(size()), 0);
  env_received_.assign(static_cast<size_t>(size()), 0);
  state()->set_explainer(SideChannel::create(mpi_, state(), timeout));
  ::st::cuda::DeviceGuard guard(device_);
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CHECK_CUDA(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  barrier_buf_ = Tensor::zeros({1}, DType::i32, Device::cuda);
}

NcclCommunicator::~NcclCommunicator() {
  ::st::cuda::DeviceGuard guard(device_);
  if (!h_->aborted.load()) {
    // Flush what is in flight (bounded by the timeout), then free; abort if that fails.
    try {
      CHECK_NCCL(ncclCommFinalize(h_->comm));
      nccl_wait_ready(h_->comm, timeout(), state()->where() + ", finalize");
      ncclCommDestroy(h_->comm);
      h_->finalized.store(true);
      h_->aborted.store(true);
    } catch (const std::exception&) {
      h_->abort();
    }
  }
  if (ready_) cudaEventDestroy(ready_);
  if (stream_) cudaStreamDestroy(stream_);
  int fin = 0;
  MPI_Finalized(&fin);
  if (!broken() && !fin) MPI_Comm_free(&mpi_);
}

void NcclCommunicator::require_cuda(const Tensor& t, const char* op) const {
  ST_CHECK(t.is_cuda(), DeviceError,
           op << " on NCCL group '" << name() << "' needs CUDA tensors, got " << t.describe()
              << " (use --comm mpi for CPU tensors)");
}

std::vector<CollectiveSignature> NcclCommunicator::exchange_signatures(const CollectiveSignature& mine) {
  return mpi_exchange_signatures(mpi_, mine, *state(), timeout());
}

template <class Enqueue>
WorkPtr NcclCommunicator::launch(const char* op, uint64_t seq, std::vector<Tensor> keep, const Enqueue& enqueue,
                                 std::shared_ptr<EnvelopeBatch> env) {
  ::st::cuda::DeviceGuard guard(device_);
  CHECK_CUDA(cudaEventRecord(ready_, ::st::cuda::current_stream()));
  CHECK_CUDA(cudaStreamWaitEvent(stream_, ready_, 0));
  enqueue();
  // A non-blocking communicator may still be enqueueing (ncclInProgress): the completion event
  // must come after the kernels. Usually it is done at once; only then is the message built.
  if (!nccl_ready_now(h_->comm)) {
    try {
      nccl_wait_ready(h_->comm, timeout(), state()->where() + ", enqueue " + op + " seq " + std::to_string(seq));
    } catch (const CommError& e) {
      state()->mark_broken(e.what());
      throw;
    }
  }
  cudaEvent_t done = h_->events.get();
  cudaError_t rc = cudaEventRecord(done, stream_);
  if (rc != cudaSuccess) h_->events.put(done);  // never recorded: reusable
  CHECK_CUDA(rc);
  return std::make_shared<NcclWork>(state(), op, seq, h_, done, std::move(keep), std::move(env));
}

WorkPtr NcclCommunicator::do_all_reduce(const Tensor& in, const Tensor& out, ReduceOp op, uint64_t seq) {
  require_cuda(in, "allreduce");
  // in (n) → out (n); in == out is in place.
  return launch("allreduce", seq, {in, out}, [&] {
    CHECK_NCCL(ncclAllReduce(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()), nccl_type(in.dtype()),
                             nccl_op(op), h_->comm, stream_));
  });
}

WorkPtr NcclCommunicator::do_reduce(const Tensor& in, const Tensor& out, int root, ReduceOp op, uint64_t seq) {
  require_cuda(in, "reduce");
  // in (n) → out (n) on the root (NCCL ignores recvbuff elsewhere); in == out is in place.
  return launch("reduce", seq, {in, out}, [&] {
    CHECK_NCCL(ncclReduce(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()), nccl_type(in.dtype()),
                          nccl_op(op), root, h_->comm, stream_));
  });
}

WorkPtr NcclCommunicator::do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, uint64_t seq) {
  require_cuda(in, "reduce_scatter");
  // in (size·n) → out (n)
  return launch("reduce_scatter", seq, {in, out}, [&] {
    CHECK_NCCL(ncclReduceScatter(in.data_ptr(), out.data_ptr(), static_cast<size_t>(out.numel()),
                                 nccl_type(in.dtype()), nccl_op(op), h_->comm, stream_));
  });
}

WorkPtr NcclCommunicator::do_all_gather(const Tensor& in, const Tensor& out, uint64_t seq) {
  require_cuda(in, "all_gather");
  // in (n) → out (size·n)
  return launch("all_gather", seq, {in, out}, [&] {
    CHECK_NCCL(ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()), nccl_type(in.dtype()),
                             h_->comm, stream_));
  });
}

WorkPtr NcclCommunicator::do_broadcast(const Tensor& t, int root, uint64_t seq) {
  require_cuda(t, "broadcast");
  return launch("broadcast", seq, {t}, [&] {
    CHECK_NCCL(ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), root,
                             h_->comm, stream_));
  });
}

WorkPtr NcclCommunicator::do_barrier(uint64_t seq) {
  // A one-element all-reduce: completes only once every rank reached it.
  return launch("barrier", seq, {barrier_buf_}, [&] {
    CHECK_NCCL(ncclAllReduce(barrier_buf_.data_ptr(), barrier_buf_.data_ptr(), 1, ncclInt32, ncclSum, h_->comm,
                             stream_));
  });
}

std::shared_ptr<Communicator> NcclCommunicator::do_split(int color, int key, const std::string& name) {
  MPI_Comm child_mpi = MPI_COMM_NULL;
  try {
    mpi_agree(mpi_, timeout(), state()->where() + ", op split");
  } catch (const TimeoutError& e) {
    state()->mark_broken(e.what());
    throw;
  }
  const std::string what = state()->where() + ", op split into '" + name + "'";
  CHECK_MPI(MPI_Comm_split(mpi_, color < 0 ? MPI_UNDEFINED : color, key, &child_mpi), what);
  if (child_mpi != MPI_COMM_NULL) mpi_errors_return(child_mpi, what);
  ::st::cuda::DeviceGuard guard(device_);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t child = nullptr;
  CHECK_NCCL(ncclCommSplit(h_->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, &config));
  try {
    nccl_wait_ready(h_->comm, timeout(), state()->where() + ", op split");
    if (child) nccl_wait_ready(child, timeout(), "group '" + name + "' initialisation (ncclCommSplit)");
  } catch (const CommError& e) {
    if (child) ncclCommAbort(child);
    state()->mark_broken(e.what());
    throw;
  }
  if (child_mpi == MPI_COMM_NULL || !child) return nullptr;
  return std::make_shared<NcclCommunicator>(child, child_mpi, device_, name, timeout(), options());
}

WorkPtr NcclCommunicator::do_batch_p2p(const std::vector<P2POp>& ops, const std::string& op_name, uint64_t seq) {
  std::vector<Tensor> keep;
  for (const auto& o : ops) {
    require_cuda(o.tensor, op_name.c_str());
    keep.push_back(o.tensor);
  }
  // The envelopes (host, over MPI) make NCCL's matching order checkable: see envelopes.h.
  const std::string who = state()->where() + ", op " + op_name + ", seq " + std::to_string(seq);
  std::shared_ptr<EnvelopeBatch> env = EnvelopeBatch::post(mpi_, rank(), ops, env_sent_, env_received_, who);
  // One NCCL group: every send and receive is issued together, so neighbours cannot deadlock on
  // order. NCCL matches them per peer in issue order, across groups too.
  try {
    return launch(
        op_name.c_str(), seq, std::move(keep),
        [&] {
          CHECK_NCCL(ncclGroupStart());
          for (const auto& o : ops) {
            const size_t n = static_cast<size_t>(o.tensor.numel());
            if (o.kind == P2POp::Kind::send)
              CHECK_NCCL(ncclSend(o.tensor.data_ptr(), n, nccl_type(o.tensor.dtype()), o.peer, h_->comm, stream_));
            else
              CHECK_NCCL(ncclRecv(o.tensor.data_ptr(), n, nccl_type(o.tensor.dtype()), o.peer, h_->comm, stream_));
          }
          CHECK_NCCL(ncclGroupEnd());
        },
        env);
  } catch (const std::exception&) {
    keep_alive_forever(env);  // its MPI requests are posted
    throw;
  }
}

}  // namespace st::comm
