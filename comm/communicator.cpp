// The backend-independent half of Communicator: argument checks, sequence numbers and the
// debug-mode signature check that runs before each collective (see communicator.h).
#include "comm/communicator.h"

#include <algorithm>
#include <sstream>

namespace st::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
  }
  return "?";
}

const char* collective_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::allreduce: return "allreduce";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::broadcast: return "broadcast";
    case CollectiveKind::barrier: return "barrier";
    case CollectiveKind::split: return "split";
    case CollectiveKind::reduce: return "reduce";
  }
  return "?";
}

std::string describe_signature(const CollectiveSignature& s) {
  std::ostringstream os;
  auto kind = static_cast<CollectiveKind>(s.op);
  os << collective_name(kind);
  if (kind == CollectiveKind::allreduce || kind == CollectiveKind::reduce_scatter)
    os << "(" << reduce_op_name(static_cast<ReduceOp>(s.arg)) << ")";
  if (kind == CollectiveKind::reduce)
    os << "(" << reduce_op_name(static_cast<ReduceOp>(s.arg)) << ", root " << s.root << ")";
  if (kind == CollectiveKind::broadcast) os << "(root " << s.root << ")";
  if (kind != CollectiveKind::barrier && kind != CollectiveKind::split)
    os << " " << dtype_name(static_cast<DType>(s.dtype)) << " x" << s.count;
  os << " seq " << s.seq;
  if (s.tag >= 0) os << " tag " << s.tag;
  return os.str();
}

Communicator::Communicator(std::shared_ptr<CommState> state, const CommOptions& options)
    : state_(std::move(state)), options_(options), debug_(options.debug) {
  options_.validate();
  auto& p = state_->progress();
  p.sends_to.assign(static_cast<size_t>(state_->size()), 0);
  p.recvs_from.assign(static_cast<size_t>(state_->size()), 0);
  if (options_.flight_recorder_entries > 0)
    state_->set_recorder(std::make_shared<FlightRecorder>(static_cast<size_t>(options_.flight_recorder_entries)));
  register_comm_state(state_);
}

WorkPtr Communicator::awaiting(WorkPtr w, Awaited a, uint64_t first, uint32_t n) const {
  w->awaited_ = std::move(a);
  w->flight_first_ = first;
  w->flight_n_ = n;
  if (n > 0 && state_->recorder() && w->started()) {  // handed to the backend at issue
    state_->recorder()->mark_started(first, n, flight_now_ns());
    w->flight_started_ = true;
  }
  return w;
}

void Communicator::check_usable(const char* op) const {
  if (state_->broken())
    ST_THROW(CommError, "comm error: " << state_->where() << ", op " << op
                                       << ": communicator is broken: " << state_->broken_reason());
}

void Communicator::check_tensor(const Tensor& t, const char* op, const char* what) const {
  ST_CHECK(t.defined(), ValueError, op << " on group '" << name() << "': " << what << " tensor is undefined");
  ST_CHECK(t.is_contiguous(), ValueError,
           op << " on group '" << name() << "': " << what << " tensor must be contiguous, got " << t.describe());
}

std::pair<uint64_t, uint64_t> Communicator::begin_collective(const CollectiveSignature& sig, int64_t elem_size) {
  uint64_t& issued = state_->progress().collectives;
  const uint64_t seq = issued;
  const auto kind = static_cast<CollectiveKind>(sig.op);
  if (debug_) {
    CollectiveSignature mine = sig;
    mine.seq = static_cast<int64_t>(seq);
    std::vector<CollectiveSignature> all = exchange_signatures(mine);
    bool same = true;
    for (const auto& s : all) same = same && s == all[0];
    if (!same) {
      std::ostringstream os;
      os << "collective mismatch in group '" << name() << "' (debug mode) before " << collective_name(kind)
         << " seq " << seq << ":";
      for (size_t r = 0; r < all.size(); ++r) os << (r ? ";" : "") << " rank " << r << " " << describe_signature(all[r]);
      // Nothing was issued: the group stays usable, but the caller's program is wrong.
      issued++;
      throw CommError(os.str());
    }
  }
  issued++;
  uint64_t id = 0;
  if (const auto& rec = state_->recorder()) {
    FlightEntry e;
    e.seq = seq;
    e.op = static_cast<FlightOp>(sig.op);
    e.dtype = static_cast<int32_t>(sig.dtype);
    e.arg = static_cast<int32_t>(sig.arg);
    e.root = static_cast<int32_t>(sig.root);
    e.count = sig.count;
    e.bytes = sig.count * elem_size;
    e.tag = sig.tag;
    id = rec->record(e);
  }
  return {seq, id};
}

namespace {
int64_t i64(DType t) { return static_cast<int64_t>(t); }
int64_t i64(ReduceOp op) { return static_cast<int64_t>(op); }
int64_t i64(CollectiveKind k) { return static_cast<int64_t>(k); }
int64_t elem_bytes(const Tensor& t) { return static_cast<int64_t>(dtype_size(t.dtype())); }  // per element
}  // namespace

WorkPtr Communicator::all_reduce(const Tensor& t, ReduceOp op, CallerTag tag) { return all_reduce(t, t, op, tag); }

WorkPtr Communicator::all_reduce(const Tensor& in, const Tensor& out, ReduceOp op, CallerTag tag) {
  check_usable("allreduce");
  check_tensor(in, "allreduce", "input");
  check_tensor(out, "allreduce", "output");
  ST_CHECK(in.numel() == out.numel() && in.dtype() == out.dtype() && in.device() == out.device(), ShapeError,
           "allreduce on group '" << name() << "': input " << in.describe() << " vs output " << out.describe());
  ST_CHECK(op != ReduceOp::avg || is_floating(in.dtype()), DTypeError,
           "allreduce(avg) on group '" << name() << "' needs a floating dtype, got " << dtype_name(in.dtype()));
  auto [seq, id] = begin_collective(
      {i64(CollectiveKind::allreduce), i64(in.dtype()), in.numel(), i64(op), -1, tag.value, 0}, elem_bytes(in));
  if (in.numel() > max_count()) return awaiting(chunked_all_reduce(in, out, op, seq), {true, {}}, id, 1);
  return awaiting(do_all_reduce(in, out, op, seq), {true, {}}, id, 1);
}

WorkPtr Communicator::reduce(const Tensor& in, const Tensor& out, int root, ReduceOp op, CallerTag tag) {
  check_usable("reduce");
  check_tensor(in, "reduce", "input");
  check_tensor(out, "reduce", "output");
  ST_CHECK(in.numel() == out.numel() && in.dtype() == out.dtype() && in.device() == out.device(), ShapeError,
           "reduce on group '" << name() << "': input " << in.describe() << " vs output " << out.describe());
  ST_CHECK(root >= 0 && root < size(), ValueError,
           "reduce on group '" << name() << "': root " << root << " outside [0, " << size() << ")");
  ST_CHECK(op != ReduceOp::avg || is_floating(in.dtype()), DTypeError,
           "reduce(avg) on group '" << name() << "' needs a floating dtype, got " << dtype_name(in.dtype()));
  auto [seq, id] = begin_collective(
      {i64(CollectiveKind::reduce), i64(in.dtype()), in.numel(), i64(op), root, tag.value, 0}, elem_bytes(in));
  if (in.numel() > max_count()) return awaiting(chunked_reduce(in, out, root, op, seq), {true, {}}, id, 1);
  return awaiting(do_reduce(in, out, root, op, seq), {true, {}}, id, 1);
}

WorkPtr Communicator::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, CallerTag tag) {
  check_usable("reduce_scatter");
  check_tensor(in, "reduce_scatter", "input");
  check_tensor(out, "reduce_scatter", "output");
  ST_CHECK(in.numel() == out.numel() * size() && in.dtype() == out.dtype() && in.device() == out.device(),
           ShapeError,
           "reduce_scatter on group '" << name() << "' of size " << size() << ": input " << in.describe()
                                       << " must hold size x output " << out.describe());
  ST_CHECK(op != ReduceOp::avg || is_floating(in.dtype()), DTypeError,
           "reduce_scatter(avg) on group '" << name() << "' needs a floating dtype, got " << dtype_name(in.dtype()));
  auto [seq, id] = begin_collective(
      {i64(CollectiveKind::reduce_scatter), i64(in.dtype()), out.numel(), i64(op), -1, tag.value, 0},
      elem_bytes(in));
  if (in.numel() > max_count()) return awaiting(chunked_reduce_scatter(in, out, op, seq), {true, {}}, id, 1);
  return awaiting(do_reduce_scatter(in, out, op, seq), {true, {}}, id, 1);
}

WorkPtr Communicator::all_gather(const Tensor& in, const Tensor& out, CallerTag tag) {
  check_usable("all_gather");
  check_tensor(in, "all_gather", "input");
  check_tensor(out, "all_gather", "output");
  ST_CHECK(out.numel() == in.numel() * size() && in.dtype() == out.dtype() && in.device() == out.device(),
           ShapeError,
           "all_gather on group '" << name() << "' of size " << size() << ": output " << out.describe()
                                   << " must hold size x input " << in.describe());
  auto [seq, id] = begin_collective(
      {i64(CollectiveKind::all_gather), i64(in.dtype()), in.numel(), -1, -1, tag.value, 0}, elem_bytes(in));
  if (out.numel() > max_count()) return awaiting(chunked_all_gather(in, out, seq), {true, {}}, id, 1);
  return awaiting(do_all_gather(in, out, seq), {true, {}}, id, 1);
}

WorkPtr Communicator::broadcast(const Tensor& t, int root, CallerTag tag) {
  check_usable("broadcast");
  check_tensor(t, "broadcast", "");
  ST_CHECK(root >= 0 && root < size(), ValueError,
           "broadcast on group '" << name() << "': root " << root << " outside [0, " << size() << ")");
  auto [seq, id] = begin_collective(
      {i64(CollectiveKind::broadcast), i64(t.dtype()), t.numel(), -1, root, tag.value, 0}, elem_bytes(t));
  if (t.numel() > max_count()) return awaiting(chunked_broadcast(t, root, seq), {true, {}}, id, 1);
  return awaiting(do_broadcast(t, root, seq), {true, {}}, id, 1);
}

WorkPtr Communicator::barrier(CallerTag tag) {
  check_usable("barrier");
  auto [seq, id] = begin_collective({i64(CollectiveKind::barrier), i64(DType::f32), 0, -1, -1, tag.value, 0}, 0);
  return awaiting(do_barrier(seq), {true, {}}, id, 1);
}

std::shared_ptr<Communicator> Communicator::split(int color, int key, const std::string& child_name) {
  check_usable("split");
  const uint64_t id = begin_collective({i64(CollectiveKind::split), i64(DType::f32), 0, -1, -1, -1, 0}, 0).second;
  std::string n = child_name.empty() ? name() + "/" + std::to_string(color) : child_name;
  if (const auto& rec = state_->recorder()) rec->mark_started(id, 1, flight_now_ns());
  auto child = do_split(color, key, n);  // the backend builds it with options()
  if (const auto& rec = state_->recorder()) rec->mark_completed(id, 1, flight_now_ns());
  if (child) {
    child->debug_ = debug_;
    child->state_->set_diagnoser(state_->diagnoser());
  }
  return child;
}

WorkPtr Communicator::send(const Tensor& t, int dst, int tag) { return batch_p2p({P2POp::send(t, dst, tag)}); }

WorkPtr Communicator::recv(const Tensor& t, int src, int tag) { return batch_p2p({P2POp::recv(t, src, tag)}); }

WorkPtr Communicator::batch_p2p(const std::vector<P2POp>& given) {
  std::string op_name =
      given.size() == 1 ? (given[0].kind == P2POp::Kind::send ? "send" : "recv") : "batch_p2p";
  check_usable(op_name.c_str());
  for (const auto& o : given) {
    check_tensor(o.tensor, op_name.c_str(), o.kind == P2POp::Kind::send ? "send" : "recv");
    ST_CHECK(o.peer >= 0 && o.peer < size() && o.peer != rank(), ValueError,
             op_name << " on group '" << name() << "' (rank " << rank() << " of " << size() << "): peer " << o.peer
                     << " is not another rank of the group");
    ST_CHECK(o.tag >= 0 && o.tag <= 32767, ValueError,
             op_name << " on group '" << name() << "': tag " << o.tag << " outside [0, 32767]");
  }
  auto& p = state_->progress();
  const uint64_t seq = p.p2p++;
  if (given.empty()) return std::make_shared<CompletedWork>(state_, op_name, seq);
  // Transfers above max_count() elements as several of the same tag, in order (both ends split
  // alike, so they still match in issue order).
  const std::vector<P2POp> ops = chunked_p2p(given);
  // Per-peer issue counts: the k-th send to a peer must meet its k-th receive from this rank.
  Awaited a;
  const auto& rec = state_->recorder();
  uint64_t first = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& o = ops[i];
    auto it = std::find_if(a.transfers.begin(), a.transfers.end(), [&](const auto& t) { return t.peer == o.peer; });
    if (it == a.transfers.end()) it = a.transfers.insert(a.transfers.end(), Awaited::Transfer{o.peer, 0, 0});
    if (o.kind == P2POp::Kind::send)
      it->send_index = ++p.sends_to[static_cast<size_t>(o.peer)];
    else
      it->recv_index = ++p.recvs_from[static_cast<size_t>(o.peer)];
    if (rec) {
      FlightEntry e;
      e.seq = seq;
      e.op = o.kind == P2POp::Kind::send ? FlightOp::send : FlightOp::recv;
      e.peer = o.peer;
      e.dtype = static_cast<int32_t>(o.tensor.dtype());
      e.count = o.tensor.numel();
      e.bytes = static_cast<int64_t>(o.tensor.nbytes());
      e.tag = o.tag;
      const uint64_t id = rec->record(e);
      if (i == 0) first = id;
    }
  }
  return awaiting(do_batch_p2p(ops, op_name, seq), std::move(a), first, rec ? static_cast<uint32_t>(ops.size()) : 0);
}

}  // namespace st::comm
