// MPI backend (see mpi_communicator.h). Every operation: decide where MPI reads and writes each
// tensor (its own memory, or a pinned staging block: host_stage.h), start the downloads of staged
// inputs, and hand the operation to the communicator's PostQueue (post_queue.h), which posts it —
// the host's f32 widening, then one nonblocking MPI call — in issue order once its blocks are
// ready; the MpiWork's finish() then scales avg results, rounds widened f16 / bf16 values once,
// and uploads staged results to CUDA tensors.
#include "comm/mpi/mpi_communicator.h"

#include <functional>

#include "comm/keep_alive.h"
#include "comm/mpi/cuda_aware.h"
#include "comm/mpi/host_stage.h"
#include "comm/mpi_wait.h"
#include "comm/poll_hooks.h"
#include "comm/side_channel.h"

namespace st::comm {
namespace {

using mpi::is_half;
using mpi::Place;
using mpi::ready;
using mpi::Staged;
using mpi::writeback;

// Everything an in-flight MPI operation touches; outlives the Work if the Work is abandoned.
struct MpiPayload final : mpi::Postable {
  std::vector<MPI_Request> reqs;
  std::vector<Tensor> keep;     // the caller's tensors (MPI may read or write their memory)
  std::vector<Staged> staged;   // every staging block MPI or the host reads or writes (leases)
  std::function<void(MPI_Request*)> start;  // the host's preparation and the MPI call
  std::function<void()> after;  // runs once after completion
  bool ready() override { return mpi::staged_ready(staged); }
  void post() override {
    start(reqs.data());
    start = nullptr;
  }
};

class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<CommState> state, std::string op, uint64_t seq, std::shared_ptr<MpiPayload> p,
          std::shared_ptr<mpi::PostQueue> posts)
      : Work(std::move(state), std::move(op), seq), p_(std::move(p)), posts_(std::move(posts)) {}
  ~MpiWork() override { settle(); }
  std::string pending_note() const override { return p_->posted ? "" : mpi::kNotPostedNote; }
  bool started() const override { return p_->posted; }

 protected:
  bool poll() override {
    if (!p_->posted) posts_->progress();
    if (!p_->error.empty()) throw CommError(p_->error);
    if (!p_->posted) return false;
    int flag = 0;
    try {
      CHECK_MPI(MPI_Testall(static_cast<int>(p_->reqs.size()), p_->reqs.data(), &flag, MPI_STATUSES_IGNORE),
                describe());
    } catch (const CommError& e) {
      state()->mark_broken(e.what());
      throw;
    }
    return flag != 0;
  }
  void finish() override {
    if (p_->after) p_->after();
    p_->after = nullptr;  // returns the leases it holds to the pool
    p_->keep.clear();
    p_->staged.clear();
  }
  void abandon() override { keep_alive_forever(p_); }

 private:
  std::shared_ptr<MpiPayload> p_;
  std::shared_ptr<mpi::PostQueue> posts_;
};

// A batch_p2p call in the PostQueue: handed to the P2PQueue (default: posted; strict: queued
// behind the previous batch) once its staged sends are downloaded.
struct P2PPost final : mpi::Postable {
  std::shared_ptr<mpi::P2PQueue> queue;
  std::shared_ptr<mpi::P2PBatch> batch;
  bool ready() override { return mpi::staged_ready(batch->staged); }
  void post() override { queue->issue(batch); }
};

WorkPtr launch(std::shared_ptr<CommState> state, const std::shared_ptr<mpi::PostQueue>& posts, const char* op,
               uint64_t seq, std::shared_ptr<MpiPayload> p) {
  posts->issue(p);
  return std::make_shared<MpiWork>(std::move(state), op, seq, std::move(p), posts);
}

// Names an operation in MPI errors, built only when one occurs (CHECK_MPI evaluates it lazily).
struct Where {
  std::shared_ptr<CommState> state;
  const char* op;
  uint64_t seq;
  std::string str() const { return state->where() + ", op " + op + ", seq " + std::to_string(seq); }
};

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }
MPI_Datatype raw_type(const Tensor& t) { return mpi_raw_type(static_cast<int>(t.dtype())); }
int count_of(const Tensor& t) { return static_cast<int>(t.numel()); }
bool same_memory(const Tensor& a, const Tensor& b) { return a.storage() == b.storage(); }
float* f32_ptr(const Staged& s) { return static_cast<float*>(s.ptr); }

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, const std::string& name, Millis timeout, const CommOptions& options)
    : Communicator(std::make_shared<CommState>(
          [&] {
            int r = 0;
            CHECK_MPI(MPI_Comm_rank(mpi_errors_return(comm, "communicator '" + name + "'"), &r),
                      "communicator '" + name + "'");
            return r;
          }(),
          [&] {
            int s = 0;
            CHECK_MPI(MPI_Comm_size(comm, &s), "communicator '" + name + "'");
            return s;
          }(),
          name, timeout), options),
      comm_(comm),
      stage_(mpi::cuda_path(options.mpi_cuda_aware).aware),
      posts_(std::make_shared<mpi::PostQueue>(state())),
      p2p_(std::make_shared<mpi::P2PQueue>(comm_, state())) {
  state()->set_explainer(SideChannel::create(comm_, state(), timeout));
  register_poll_hook(posts_);
  register_poll_hook(p2p_);
}

MpiCommunicator::~MpiCommunicator() {
  // A broken communicator may still have requests in flight, a strict one batches not yet posted,
  // and the post queue operations its Works will post: leave its MPI_Comm alone.
  int fin = 0;
  MPI_Finalized(&fin);
  if (!broken() && !fin && p2p_->idle() && posts_->idle()) MPI_Comm_free(&comm_);
}

std::shared_ptr<MpiCommunicator> MpiCommunicator::dup(MPI_Comm parent, const std::string& name, Millis timeout,
                                                      const CommOptions& options) {
  require_mpi("MpiCommunicator::dup");
  const std::string what = "creating communicator '" + name + "' (MPI_Comm_idup)";
  MPI_Comm child = MPI_COMM_NULL;
  MPI_Request req;
  {
    ErrorsReturnScope errors(parent);  // the caller's communicator, e.g. MPI_COMM_WORLD
    CHECK_MPI(MPI_Comm_idup(parent, &child, &req), what);
  }
  mpi_wait_deadline(&req, timeout, what);
  return std::make_shared<MpiCommunicator>(mpi_errors_return(child, what), name, timeout, options);
}

std::string MpiCommunicator::describe(const std::string& op, uint64_t seq) const {
  return state()->where() + ", op " + op + ", seq " + std::to_string(seq);
}

std::vector<CollectiveSignature> MpiCommunicator::exchange_signatures(const CollectiveSignature& mine) {
  // The exchange is a collective on comm_: it must not overtake operations still queued.
  posts_->flush(timeout(), state()->where() + ", debug signature exchange");
  return mpi_exchange_signatures(comm_, mine, *state(), timeout());
}

WorkPtr MpiCommunicator::do_all_reduce(const Tensor& in, const Tensor& out, ReduceOp op, uint64_t seq) {
  auto p = std::make_shared<MpiPayload>();
  p->reqs.resize(1);
  p->keep = {in, out};
  const int n = count_of(in);
  const double divisor = op == ReduceOp::avg ? size() : 1.0;
  const MPI_Comm comm = comm_;
  const Where who{state(), "allreduce", seq};
  if (is_half(in.dtype())) {
    // in (n) f16/bf16 → wide (n) f32, reduced in place, rounded once into out (n) (through the
    // input's staging block when there is one: same dtype and size).
    Staged h = stage_.input(in, Place::host), wide = stage_.scratch(n * sizeof(float));
    Staged hout = h.block ? h : stage_.output(out, Place::host);
    p->staged = {h, wide, hout};
    p->start = [h, wide, n, dtype = in.dtype(), op, comm, who](MPI_Request* req) {
      mpi::widen_f32(h.ptr, dtype, f32_ptr(wide), n);
      CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, wide.ptr, n, MPI_FLOAT, mpi_op(op), comm, req), who.str());
    };
    p->after = [wide, hout, out, n, divisor] {
      mpi::narrow_from_f32(f32_ptr(wide), hout.ptr, out.dtype(), n, divisor);
      writeback(hout, out);
    };
  } else {
    // in (n) → out (n); out may be in itself (MPI_IN_PLACE) but no other part of in's storage.
    const bool in_place = in.data_ptr() == out.data_ptr();
    Staged si = stage_.input(in, Place::any);
    Staged so = in_place ? si : stage_.output(out, same_memory(in, out) ? Place::separate : Place::any);
    ready(si);
    if (!in_place) ready(so);
    p->staged = {si, so};
    p->start = [si, so, in_place, n, type = raw_type(in), op, comm, who](MPI_Request* req) {
      CHECK_MPI(MPI_Iallreduce(in_place ? MPI_IN_PLACE : si.ptr, so.ptr, n, type, mpi_op(op), comm, req), who.str());
    };
    p->after = [so, out, divisor] {
      mpi::divide(so, out, divisor);
      writeback(so, out);
    };
  }
  return launch(state(), posts_, "allreduce", seq, std::move(p));
}

WorkPtr MpiCommunicator::do_reduce(const Tensor& in, const Tensor& out, int root, ReduceOp op, uint64_t seq) {
  auto p = std::make_shared<MpiPayload>();
  p->reqs.resize(1);
  p->keep = {in, out};
  const int n = count_of(in);
  const bool is_root = rank() == root;
  const double divisor = op == ReduceOp::avg ? size() : 1.0;
  const MPI_Comm comm = comm_;
  const Where who{state(), "reduce", seq};
  // Only the root's out is written (and staged); the others send their in.
  if (is_half(in.dtype())) {
    // in (n) f16/bf16 → wide (n) f32 → the root reduces in place into its wide, rounds once into out.
    Staged h = stage_.input(in, Place::host), wide = stage_.scratch(n * sizeof(float));
    Staged hout = !is_root ? Staged{} : h.block ? h : stage_.output(out, Place::host);
    p->staged = {h, wide, hout};
    p->start = [h, wide, n, dtype = in.dtype(), op, root, is_root, comm, who](MPI_Request* req) {
      mpi::widen_f32(h.ptr, dtype, f32_ptr(wide), n);
      CHECK_MPI(MPI_Ireduce(is_root ? MPI_IN_PLACE : wide.ptr, is_root ? wide.ptr : nullptr, n, MPI_FLOAT,
                            mpi_op(op), root, comm, req),
                who.str());
    };
    if (is_root)
      p->after = [wide, hout, out, n, divisor] {
        mpi::narrow_from_f32(f32_ptr(wide), hout.ptr, out.dtype(), n, divisor);
        writeback(hout, out);
      };
  } else {
    // in (n) → the root's out (n); on the root out may be in itself (MPI_IN_PLACE) but no other
    // part of in's storage.
    const bool in_place = is_root && in.data_ptr() == out.data_ptr();
    Staged si = stage_.input(in, Place::any);
    Staged so = !is_root ? Staged{} : in_place ? si : stage_.output(out, same_memory(in, out) ? Place::separate : Place::any);
    ready(si);
    if (is_root && !in_place) ready(so);
    p->staged = {si, so};
    p->start = [si, so, in_place, n, type = raw_type(in), op, root, comm, who](MPI_Request* req) {
      CHECK_MPI(MPI_Ireduce(in_place ? MPI_IN_PLACE : si.ptr, so.ptr, n, type, mpi_op(op), root, comm, req), who.str());
    };
    if (is_root)
      p->after = [so, out, divisor] {
        mpi::divide(so, out, divisor);
        writeback(so, out);
      };
  }
  return launch(state(), posts_, "reduce", seq, std::move(p));
}

WorkPtr MpiCommunicator::do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, uint64_t seq) {
  auto p = std::make_shared<MpiPayload>();
  p->reqs.resize(1);
  p->keep = {in, out};
  const int n = count_of(out);
  const double divisor = op == ReduceOp::avg ? size() : 1.0;
  const MPI_Comm comm = comm_;
  const Where who{state(), "reduce_scatter", seq};
  if (is_half(in.dtype())) {
    // in (size·n) → wide_in (size·n) f32 → wide_out (n) f32 → out (n), rounded once. out is
    // written only after MPI finished, so it may be in's own chunk.
    Staged h = stage_.input(in, Place::host);
    Staged wide_in = stage_.scratch(static_cast<size_t>(in.numel()) * sizeof(float));
    Staged wide_out = stage_.scratch(n * sizeof(float)), hout = stage_.output(out, Place::host);
    p->staged = {h, wide_in, wide_out, hout};
    p->start = [h, wide_in, wide_out, n, total = in.numel(), dtype = in.dtype(), op, comm, who](MPI_Request* req) {
      mpi::widen_f32(h.ptr, dtype, f32_ptr(wide_in), static_cast<size_t>(total));
      CHECK_MPI(MPI_Ireduce_scatter_block(wide_in.ptr, wide_out.ptr, n, MPI_FLOAT, mpi_op(op), comm, req), who.str());
    };
    p->after = [wide_out, hout, out, n, divisor] {
      mpi::narrow_from_f32(f32_ptr(wide_out), hout.ptr, out.dtype(), n, divisor);
      writeback(hout, out);
    };
  } else {
    // in (size·n) → out (n). out may be in's own chunk: then MPI receives into a separate block.
    Staged si = stage_.input(in, Place::any);
    Staged so = stage_.output(out, same_memory(in, out) ? Place::separate : Place::any);
    ready(si);
    ready(so);
    p->staged = {si, so};
    p->start = [si, so, n, type = raw_type(in), op, comm, who](MPI_Request* req) {
      CHECK_MPI(MPI_Ireduce_scatter_block(si.ptr, so.ptr, n, type, mpi_op(op), comm, req), who.str());
    };
    p->after = [so, out, divisor] {
      mpi::divide(so, out, divisor);
      writeback(so, out);
    };
  }
  return launch(state(), posts_, "reduce_scatter", seq, std::move(p));
}

WorkPtr MpiCommunicator::do_all_gather(const Tensor& in, const Tensor& out, uint64_t seq) {
  auto p = std::make_shared<MpiPayload>();
  p->reqs.resize(1);
  p->keep = {in, out};
  const int n = count_of(in);
  const size_t chunk_bytes = in.nbytes();
  const bool aliased = same_memory(in, out);
  const bool in_place =
      aliased && static_cast<char*>(in.data_ptr()) == static_cast<char*>(out.data_ptr()) + rank() * chunk_bytes;
  // in (n) → out (size·n). In place: MPI reads this rank's chunk from out itself. Otherwise an in
  // that lies elsewhere in out's storage is copied first (MPI buffers must not overlap).
  Staged so, si;
  if (in_place) {
    so = stage_.input_chunk(out, in, rank() * chunk_bytes);
  } else {
    si = stage_.input(in, aliased ? Place::separate : Place::any);
    so = stage_.output(out, Place::any);
    ready(si);
  }
  ready(so);
  p->staged = {si, so};
  p->start = [si, so, in_place, n, type = raw_type(in), comm = comm_, who = Where{state(), "all_gather", seq}](MPI_Request* req) {
    CHECK_MPI(MPI_Iallgather(in_place ? MPI_IN_PLACE : si.ptr, in_place ? 0 : n, in_place ? MPI_DATATYPE_NULL : type,
                             so.ptr, n, type, comm, req),
              who.str());
  };
  p->after = [so, out] { writeback(so, out); };
  return launch(state(), posts_, "all_gather", seq, std::move(p));
}

WorkPtr MpiCommunicator::do_broadcast(const Tensor& t, int root, uint64_t seq) {
  auto p = std::make_shared<MpiPayload>();
  p->reqs.resize(1);
  p->keep = {t};
  Staged s = rank() == root ? stage_.input(t, Place::any) : stage_.output(t, Place::any);  // t (n)
  ready(s);
  p->staged = {s};
  p->start = [s, n = count_of(t), type = raw_type(t), root, comm = comm_, who = Where{state(), "broadcast", seq}](MPI_Request* req) {
    CHECK_MPI(MPI_Ibcast(s.ptr, n, type, root, comm, req), who.str());
  };
  if (rank() != root) p->after = [s, t] { writeback(s, t); };
  return launch(state(), posts_, "broadcast", seq, std::move(p));
}

WorkPtr MpiCommunicator::do_barrier(uint64_t seq) {
  auto p = std::make_shared<MpiPayload>();
  p->reqs.resize(1);
  p->start = [comm = comm_, who = Where{state(), "barrier", seq}](MPI_Request* req) { CHECK_MPI(MPI_Ibarrier(comm, req), who.str()); };
  return launch(state(), posts_, "barrier", seq, std::move(p));
}

std::shared_ptr<Communicator> MpiCommunicator::do_split(int color, int key, const std::string& name) {
  try {
    // MPI_Ibarrier and MPI_Comm_split are collectives on comm_: queued operations go first.
    posts_->flush(timeout(), state()->where() + ", op split");
    mpi_agree(comm_, timeout(), state()->where() + ", op split");
  } catch (const TimeoutError& e) {
    state()->mark_broken(e.what());
    throw;
  }
  // Every rank reached the split: the blocking MPI_Comm_split below cannot wait on a missing peer.
  MPI_Comm child = MPI_COMM_NULL;
  const std::string what = state()->where() + ", op split into '" + name + "'";
  CHECK_MPI(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &child), what);
  if (child == MPI_COMM_NULL) return nullptr;
  return std::make_shared<MpiCommunicator>(mpi_errors_return(child, what), name, timeout(), options());
}

WorkPtr MpiCommunicator::do_batch_p2p(const std::vector<P2POp>& ops, const std::string& op_name, uint64_t seq) {
  auto b = std::make_shared<mpi::P2PBatch>();
  b->op = op_name;
  b->seq = seq;
  b->who = describe(op_name, seq);
  b->strict = p2p_mode() == P2PMode::strict;
  // Every buffer staged (downloads started) before anything is posted; the batch is posted once
  // all of them are ready (the PostQueue).
  for (const P2POp& o : ops) {
    const bool is_recv = o.kind == P2POp::Kind::recv;
    b->keep.push_back(o.tensor);
    b->staged.push_back(is_recv ? stage_.output(o.tensor, Place::any) : stage_.input(o.tensor, Place::any));
  }
  for (const Staged& st : b->staged) ready(st);
  std::vector<std::pair<Staged, Tensor>> copy_back;  // (block, CUDA destination) of staged receives
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& o = ops[i];
    const bool is_recv = o.kind == P2POp::Kind::recv;
    b->transfers.push_back({is_recv, o.peer, o.tag, count_of(o.tensor), o.tensor.dtype(), 0, b->staged[i].ptr});
    if (is_recv && b->staged[i].block) copy_back.emplace_back(b->staged[i], o.tensor);
  }
  if (!copy_back.empty())
    b->after = [copy_back] {
      for (const auto& [st, dst] : copy_back) writeback(st, dst);
    };
  auto post = std::make_shared<P2PPost>();
  post->queue = p2p_;
  post->batch = b;
  posts_->issue(post);
  return mpi::make_p2p_work(state(), op_name, seq, p2p_, b, posts_, post);
}

}  // namespace st::comm
