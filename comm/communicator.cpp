// The backend-independent half of Communicator: argument checks, sequence numbers and the
// debug-mode signature check that runs before each collective (see communicator.h).
#include "comm/communicator.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
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

bool debug_env_enabled() {
  const char* v = std::getenv("SHARDTRAIN_COMM_DEBUG");
  return v && *v && std::string(v) != "0";
}

int64_t max_count_from_env() {
  const char* v = std::getenv("SHARDTRAIN_COMM_MAX_COUNT");
  if (!v || !*v) return INT_MAX;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v, &end, 10);
  ST_CHECK(errno == 0 && *end == '\0' && n >= 1 && n <= INT_MAX, ValueError,
           "SHARDTRAIN_COMM_MAX_COUNT must be an integer in [1, 2147483647] (or unset), got '" << v << "'");
  return n;
}

P2PMode p2p_mode_from_env() {
  const char* v = std::getenv("SHARDTRAIN_P2P");
  const std::string s = v ? v : "";
  if (s.empty() || s == "default") return P2PMode::standard;
  if (s == "strict") return P2PMode::strict;
  ST_THROW(ValueError, "SHARDTRAIN_P2P must be 'default' or 'strict' (or unset), got '" << s << "'");
}

const char* p2p_mode_name(P2PMode m) { return m == P2PMode::strict ? "strict" : "default"; }

Communicator::Communicator(std::shared_ptr<CommState> state)
    : state_(std::move(state)),
      debug_(debug_env_enabled()),
      p2p_mode_(p2p_mode_from_env()),
      max_count_(max_count_from_env()) {
  auto& p = state_->progress();
  p.sends_to.assign(static_cast<size_t>(state_->size()), 0);
  p.recvs_from.assign(static_cast<size_t>(state_->size()), 0);
}

WorkPtr Communicator::awaiting(WorkPtr w, Awaited a) {
  w->awaited_ = std::move(a);
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

uint64_t Communicator::begin_collective(const CollectiveSignature& sig) {
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
  return seq;
}

namespace {
int64_t i64(DType t) { return static_cast<int64_t>(t); }
int64_t i64(ReduceOp op) { return static_cast<int64_t>(op); }
int64_t i64(CollectiveKind k) { return static_cast<int64_t>(k); }
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
  uint64_t seq = begin_collective({i64(CollectiveKind::allreduce), i64(in.dtype()), in.numel(), i64(op), -1, tag.value, 0});
  if (in.numel() > max_count_) return awaiting(chunked_all_reduce(in, out, op, seq), {true, {}});
  return awaiting(do_all_reduce(in, out, op, seq), {true, {}});
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
  uint64_t seq = begin_collective(
      {i64(CollectiveKind::reduce), i64(in.dtype()), in.numel(), i64(op), root, tag.value, 0});
  if (in.numel() > max_count_) return awaiting(chunked_reduce(in, out, root, op, seq), {true, {}});
  return awaiting(do_reduce(in, out, root, op, seq), {true, {}});
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
  uint64_t seq = begin_collective({i64(CollectiveKind::reduce_scatter), i64(in.dtype()), out.numel(),
                                   i64(op), -1, tag.value, 0});
  if (in.numel() > max_count_) return awaiting(chunked_reduce_scatter(in, out, op, seq), {true, {}});
  return awaiting(do_reduce_scatter(in, out, op, seq), {true, {}});
}

WorkPtr Communicator::all_gather(const Tensor& in, const Tensor& out, CallerTag tag) {
  check_usable("all_gather");
  check_tensor(in, "all_gather", "input");
  check_tensor(out, "all_gather", "output");
  ST_CHECK(out.numel() == in.numel() * size() && in.dtype() == out.dtype() && in.device() == out.device(),
           ShapeError,
           "all_gather on group '" << name() << "' of size " << size() << ": output " << out.describe()
                                   << " must hold size x input " << in.describe());
  uint64_t seq = begin_collective(
      {i64(CollectiveKind::all_gather), i64(in.dtype()), in.numel(), -1, -1, tag.value, 0});
  if (out.numel() > max_count_) return awaiting(chunked_all_gather(in, out, seq), {true, {}});
  return awaiting(do_all_gather(in, out, seq), {true, {}});
}

WorkPtr Communicator::broadcast(const Tensor& t, int root, CallerTag tag) {
  check_usable("broadcast");
  check_tensor(t, "broadcast", "");
  ST_CHECK(root >= 0 && root < size(), ValueError,
           "broadcast on group '" << name() << "': root " << root << " outside [0, " << size() << ")");
  uint64_t seq = begin_collective(
      {i64(CollectiveKind::broadcast), i64(t.dtype()), t.numel(), -1, root, tag.value, 0});
  if (t.numel() > max_count_) return awaiting(chunked_broadcast(t, root, seq), {true, {}});
  return awaiting(do_broadcast(t, root, seq), {true, {}});
}

WorkPtr Communicator::barrier(CallerTag tag) {
  check_usable("barrier");
  uint64_t seq =
      begin_collective({i64(CollectiveKind::barrier), i64(DType::f32), 0, -1, -1, tag.value, 0});
  return awaiting(do_barrier(seq), {true, {}});
}

std::shared_ptr<Communicator> Communicator::split(int color, int key, const std::string& child_name) {
  check_usable("split");
  begin_collective({i64(CollectiveKind::split), i64(DType::f32), 0, -1, -1, -1, 0});
  std::string n = child_name.empty() ? name() + "/" + std::to_string(color) : child_name;
  auto child = do_split(color, key, n);
  if (child) {
    child->debug_ = debug_;
    child->p2p_mode_ = p2p_mode_;
    child->max_count_ = max_count_;
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
  uint64_t seq = p2p_seq_++;
  if (given.empty()) return std::make_shared<CompletedWork>(state_, op_name, seq);
  // Transfers above max_count() elements as several of the same tag, in order (both ends split
  // alike, so they still match in issue order).
  const std::vector<P2POp> ops = chunked_p2p(given);
  // Per-peer issue counts: the k-th send to a peer must meet its k-th receive from this rank.
  Awaited a;
  auto& p = state_->progress();
  for (const auto& o : ops) {
    auto it = std::find_if(a.transfers.begin(), a.transfers.end(), [&](const auto& t) { return t.peer == o.peer; });
    if (it == a.transfers.end()) it = a.transfers.insert(a.transfers.end(), Awaited::Transfer{o.peer, 0, 0});
    if (o.kind == P2POp::Kind::send)
      it->send_index = ++p.sends_to[static_cast<size_t>(o.peer)];
    else
      it->recv_index = ++p.recvs_from[static_cast<size_t>(o.peer)];
  }
  return awaiting(do_batch_p2p(ops, op_name, seq), std::move(a));
}

}  // namespace st::comm
