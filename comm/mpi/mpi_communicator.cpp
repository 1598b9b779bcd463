// MPI backend (see mpi_communicator.h). Every operation: decide where MPI reads and writes each
// tensor (its own memory, or a pinned staging block: host_stage.h), copy staged inputs to the
// host, post one nonblocking MPI call, and return an MpiWork whose finish() scales avg
// results, rounds widened f16 / bf16 values once, and uploads staged results to CUDA tensors.
#include "comm/mpi/mpi_communicator.h"

#include <functional>

#include "comm/mpi/cuda_aware.h"
#include "comm/mpi/host_stage.h"
#include "comm/mpi_wait.h"
#include "comm/side_channel.h"

namespace st::comm {
namespace {

using mpi::is_half;
using mpi::Place;
using mpi::ready;
using mpi::Staged;
using mpi::writeback;

// Everything an in-flight MPI operation touches; outlives the Work if the Work is abandoned.
struct MpiPayload {
  std::vector<MPI_Request> reqs;
  std::vector<Tensor> keep;     // the caller's tensors (MPI may read or write their memory)
  std::vector<Staged> staged;   // staging blocks MPI reads or writes (leases)
  std::function<void()> after;  // runs once after completion
};

class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<CommState> state, std::string op, uint64_t seq, std::shared_ptr<MpiPayload> p)
      : Work(std::move(state), std::move(op), seq), p_(std::move(p)) {}
  ~MpiWork() override { settle(); }

 protected:
  bool poll() override {
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
};

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }
MPI_Datatype raw_type(const Tensor& t) { return mpi_raw_type(static_cast<int>(t.dtype())); }
int count_of(const Tensor& t) { return static_cast<int>(t.numel()); }
bool same_memory(const Tensor& a, const Tensor& b) { return a.storage() == b.storage(); }
float* f32_ptr(const Staged& s) { return static_cast<float*>(s.ptr); }

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, const std::string& name, Millis timeout)
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
          name, timeout)),
      comm_(comm),
      stage_(mpi::cuda_path().aware),
      p2p_(std::make_shared<mpi::P2PQueue>(comm_, state())) {
  state()->set_side_channel(SideChannel::create(comm_, state(), timeout));
  register_poll_hook(p2p_);
}

MpiCommunicator::~MpiCommunicator() {
  // A broken communicator may still have requests in flight, a strict one batches not yet posted:
  // leave its MPI_Comm alone.
  int fin = 0;
  MPI_Finalized(&fin);
  if (!broken() && !fin && p2p_->idle()) MPI_Comm_free(&comm_);
}

std::shared_ptr<MpiCommunicator> MpiCommunicator::dup(MPI_Comm parent, const std::string& name, Millis timeout) {
  require_mpi("MpiCommunicator::dup");
  const std::string what = "creating communicator '" + name + "' (MPI_Comm_idup)";
  MPI_Comm child = MPI_COMM_NULL;
  MPI_Request req;
  {
    ErrorsReturnScope errors(parent);  // the caller's communicator, e.g. MPI_COMM_WORLD
    CHECK_MPI(MPI_Comm_idup(parent, &child, &req), what);
  }
  mpi_wait_deadline(&req, timeout, what);
  return std::make_shared<MpiCommunicator>(mpi_errors_return(child, what), name, timeout);
}

std::string MpiCommunicator::describe(const std::string& op, uint64_t seq) const {
  return state()->where() + ", op " + op + ", seq " + std::to_string(seq);
}

std::vector<CollectiveSignature> MpiCommunicator::exchange_signatures(const CollectiveSignature& mine) {
  return mpi_exchange_signatures(comm_, mine, *state(), timeout());
}

WorkPtr MpiCommunicator::do_all_reduce(const Tensor& in, const Tensor& out, ReduceOp op, uint64_t seq) {
  auto p = std::make_shared<MpiPayload>();
  p->reqs.resize(1);
  p->keep = {in, out};
  const int n = count_of(in);
  const double divisor = op == ReduceOp::avg ? size() : 1.0;
  if (is_half(in.dtype())) {
    // in (n) f16/bf16 → wide (n) f32, reduced in place, rounded once into out (n) (through the
    // input's staging block when there is one: same dtype and size).
    Staged h = stage_.input(in, Place::host), wide = stage_.scratch(n * sizeof(float));
    Staged hout = h.block ? h : stage_.output(out, Place::host);
    ready(h);
    mpi::widen_f32(h.ptr, in.dtype(), f32_ptr(wide), n);
    p->staged = {h, wide, hout};
    CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, wide.ptr, n, MPI_FLOAT, mpi_op(op), comm_, p->reqs.data()),
              describe("allreduce", seq));
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
    CHECK_MPI(MPI_Iallreduce(in_place ? MPI_IN_PLACE : si.ptr, so.ptr, n, raw_type(in), mpi_op(op), comm_,
                             p->reqs.data()), describe("allreduce", seq));
    p->after = [so, out, divisor] {
      mpi::divide(so, out, divisor);
      writeback(so, out);
    };
  }
  return std::make_shared<MpiWork>(state(), "allreduce", seq, p);
}

WorkPtr MpiCommunicator::do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, uint64_t seq) {
  auto p = std::make_shared<MpiPayload>();
  p->reqs.resize(1);
  p->keep = {in, out};
  const int n = count_of(out);
  const double divisor = op == ReduceOp::avg ? size() : 1.0;
  if (is_half(in.dtype())) {
    // in (size·n) → wide_in (size·n) f32 → wide_out (n) f32 → out (n), rounded once. out is
    // written only after MPI finished, so it may be in's own chunk.
    Staged h = stage_.input(in, Place::host);
    Staged wide_in = stage_.scratch(static_cast<size_t>(in.numel()) * sizeof(float));
    Staged wide_out = stage_.scratch(n * sizeof(float)), hout = stage_.output(out, Place::host);
    ready(h);
    mpi::widen_f32(h.ptr, in.dtype(), f32_ptr(wide_in), in.numel());
    p->staged = {wide_in, wide_out, hout};
    CHECK_MPI(MPI_Ireduce_scatter_block(wide_in.ptr, wide_out.ptr, n, MPI_FLOAT, mpi_op(op), comm_, p->reqs.data()),
              describe("reduce_scatter", seq));
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
    CHECK_MPI(MPI_Ireduce_scatter_block(si.ptr, so.ptr, n, raw_type(in), mpi_op(op), comm_, p->reqs.data()),
              describe("reduce_scatter", seq));
    p->after = [so, out, divisor] {
      mpi::divide(so, out, divisor);
      writeback(so, out);
    };
  }
  return std::make_shared<MpiWork>(state(), "reduce_scatter", seq, p);
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
  CHECK_MPI(MPI_Iallgather(in_place ? MPI_IN_PLACE : si.ptr, in_place ? 0 : n,
                           in_place ? MPI_DATATYPE_NULL : raw_type(in), so.ptr, n, raw_type(out), comm_,
                           p->reqs.data()), describe("all_gather", seq));
  p->after = [so, out] { writeback(so, out); };
  return std::make_shared<MpiWork>(state(), "all_gather", seq, p);
}

WorkPtr MpiCommunicator::do_broadcast(const Tensor& t, int root, uint64_t seq) {
  auto p = std::make_shared<MpiPayload>();
  p->reqs.resize(1);
  p->keep = {t};
  Staged s = rank() == root ? stage_.input(t, Place::any) : stage_.output(t, Place::any);  // t (n)
  ready(s);
  p->staged = {s};
  CHECK_MPI(MPI_Ibcast(s.ptr, count_of(t), raw_type(t), root, comm_, p->reqs.data()), describe("broadcast", seq));
  if (rank() != root) p->after = [s, t] { writeback(s, t); };
  return std::make_shared<MpiWork>(state(), "broadcast", seq, p);
}

WorkPtr MpiCommunicator::do_barrier(uint64_t seq) {
  auto p = std::make_shared<MpiPayload>();
  p->reqs.resize(1);
  CHECK_MPI(MPI_Ibarrier(comm_, p->reqs.data()), describe("barrier", seq));
  return std::make_shared<MpiWork>(state(), "barrier", seq, p);
}

std::shared_ptr<Communicator> MpiCommunicator::do_split(int color, int key, const std::string& name) {
  try {
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
  return std::make_shared<MpiCommunicator>(mpi_errors_return(child, what), name, timeout());
}

WorkPtr MpiCommunicator::do_batch_p2p(const std::vector<P2POp>& ops, const std::string& op_name, uint64_t seq) {
  auto b = std::make_shared<mpi::P2PBatch>();
  b->op = op_name;
  b->seq = seq;
  b->who = describe(op_name, seq);
  b->strict = p2p_mode() == P2PMode::strict;
  // Every buffer staged (downloads complete) before anything is posted.
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
  p2p_->issue(b);
  return mpi::make_p2p_work(state(), op_name, seq, p2p_, b);
}

}  // namespace st::comm
