// Communicator: collectives and point-to-point transfers over a group of ranks, on st::Tensor.
//
// Backends (chosen by CMake, not #ifdef): comm/mpi (CPU tensors directly, CUDA tensors staged
// through host memory), comm/nccl (CUDA tensors; only built with NCCL), comm/nccl_stub (throws
// DeviceError). make_communicator.h picks one; process_grid.h builds the DP×TP×PP groups.
//
// Rules every caller must follow:
//  * EVERY RANK OF A GROUP ISSUES THE GROUP'S COLLECTIVES (all_reduce, reduce, reduce_scatter,
//    all_gather, broadcast, barrier, split) IN THE SAME ORDER, with the same dtype, count and root.
//    Debug mode (CommOptions::debug; SHARDTRAIN_COMM_DEBUG=1 in the CLI, see comm/README.md) checks this before each
//    collective — and the caller's tag, where the caller passes one — and throws CommError on a
//    mismatch instead of corrupting memory.
//  * Point-to-point: the k-th send from rank a to rank b must be b's k-th receive from a, with the
//    same tag, count and dtype (NCCL matches by issue order and has no tags; the NCCL backend and
//    the MPI backend's strict mode, CommOptions::p2p = strict, check the tag against that order and
//    throw CommError on a mismatch; the MPI backend's default mode matches by (peer, tag)). A send
//    may complete only once its receive is posted, and a batch may start only after the previous
//    one on the communicator completed (NCCL's stream; strict mode does the same), so a rank that
//    both sends to and receives from a neighbour puts them in ONE batch_p2p: then no order of
//    sends and receives across ranks can deadlock. comm/README.md has the table.
//  * Tensors must be contiguous and stay untouched until the returned Work completed.
//  * One thread issues and waits on a communicator (it is not thread-safe).
//  * Every call returns a Work; wait() has a deadline (the communicator's timeout by default).
//    A timeout breaks the communicator: every later call throws CommError (see work.h).
//    wait_on_stream() orders later work on the current CUDA stream after the operation without a
//    host wait where the backend can (NCCL).
//  * Settings come in a CommOptions (comm/comm_options.h) given at creation; split children
//    inherit their parent's. Each operation is also recorded in the communicator's flight
//    recorder (comm/flight_recorder.h), which a deadline's diagnosis reads.
//
// Sizes: any element count. MPI counts are int, so an operation of more elements than
// max_count() (2^31−1; CommOptions::max_count lowers it, for tests) is split into several
// backend calls here, on both backends, and its Work covers them all: all_reduce, reduce and
// broadcast by contiguous chunks, reduce_scatter as a reduce per rank's block (chunked),
// all_gather as a broadcast per rank's block (chunked), point to point as several transfers of
// the same tag in one batch.
//
// Layouts: tensors are treated as flat. reduce(in, out, root): in and out n elements; only the
// root's out receives the reduction (in place when in is out), the other ranks' out is untouched.
// reduce_scatter(in, out): in has size·n elements, out n;
// rank r receives the reduction of elements [r·n, (r+1)·n). all_gather(in, out): in n, out size·n,
// rank r's input lands at [r·n, (r+1)·n). "In place": all_reduce(t) and broadcast(t) overwrite t;
// all_gather is in place when `in` is out's own chunk, reduce_scatter when `out` is in's own chunk.
//
// Dtypes: f32, f16, bf16, i32, i64. avg needs a floating dtype (sum, then divide by size). The MPI
// backend reduces f16 / bf16 in f32 (one rounding at the end).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm_options.h"
#include "comm/work.h"
#include "tensor/tensor.h"

namespace st::comm {

enum class ReduceOp : uint8_t { sum, avg, max };

const char* reduce_op_name(ReduceOp op);

using WorkPtr = std::shared_ptr<Work>;

// One transfer of a batch_p2p group; `peer` is a rank of the communicator.
struct P2POp {
  enum class Kind : uint8_t { send, recv };
  Kind kind = Kind::send;
  Tensor tensor;
  int peer = 0;
  int tag = 0;
  static P2POp send(const Tensor& t, int peer, int tag = 0) { return {Kind::send, t, peer, tag}; }
  static P2POp recv(const Tensor& t, int peer, int tag = 0) { return {Kind::recv, t, peer, tag}; }
};

// An optional tag a caller puts on a collective: in debug mode it is part of the signature the
// ranks compare, so collectives that agree in op, dtype and count but not in what the caller
// means by them (the gradient reducer's buckets: it passes the bucket index) are a CommError too.
// Ignored outside debug mode. -1: none.
struct CallerTag {
  int64_t value = -1;
};

// What debug mode compares across ranks before a collective.
struct CollectiveSignature {
  int64_t op = 0;  // CollectiveKind
  int64_t dtype = 0;
  int64_t count = 0;  // elements per rank as defined by the op (see each call)
  int64_t arg = -1;   // reduce op for reductions, else -1
  int64_t root = -1;  // broadcast and reduce, else -1
  int64_t tag = -1;   // the caller's tag, -1: none
  int64_t seq = 0;
  bool operator==(const CollectiveSignature&) const = default;
};
inline constexpr size_t kSignatureFields = 7;
enum class CollectiveKind : int64_t { allreduce = 1, reduce_scatter, all_gather, broadcast, barrier, split, reduce };
const char* collective_name(CollectiveKind k);
std::string describe_signature(const CollectiveSignature& s);  // "reduce(sum, root 1) f32 x4 seq 3 tag 2"

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return state_->rank(); }
  int size() const { return state_->size(); }
  const std::string& name() const { return state_->name(); }  // group label, e.g. "tp[pp=0,dp=1]"
  virtual const char* backend() const = 0;                       // "mpi" or "nccl"
  // True when operations advance without this rank calling into comm (NCCL: the comm stream);
  // false when they advance only while some Work is polled (MPI's nonblocking collectives
  // progress inside MPI calls, and the MPI backend posts staged operations from its polls).
  virtual bool progresses_on_its_own() const = 0;
  Millis timeout() const { return state_->timeout(); }
  void set_timeout(Millis t) { state_->set_timeout(t); }
  bool debug_checks() const { return debug_; }
  void set_debug_checks(bool on) { debug_ = on; }
  // The options it was created with (a split child: its parent's).
  const CommOptions& options() const { return options_; }
  // options().p2p. The NCCL backend always behaves as strict.
  P2PMode p2p_mode() const { return options_.p2p; }
  // Elements per backend call (options().max_count; default 2^31−1, MPI's int counts); larger
  // operations are split (see "Sizes" above). Must be the same on every rank of the group.
  int64_t max_count() const { return options_.max_count; }
  // The state its Works share (comm/comm_state.h): progress, flight recorder, timeout objects.
  const std::shared_ptr<CommState>& shared_state() const { return state_; }
  // Makes a deadline on this communicator, and on every group split from it afterwards, end in
  // `d`'s diagnosis (make_communicator does this for its world: comm/deadline_gather.h).
  void set_deadline_diagnoser(std::shared_ptr<DeadlineDiagnoser> d) { state_->set_diagnoser(std::move(d)); }
  bool broken() const { return state_->broken(); }
  std::string broken_reason() const { return state_->broken_reason(); }
  // Marks the communicator broken by hand (launch/ on a fatal error elsewhere); runs the abort.
  void abort(const std::string& reason) { state_->mark_broken(reason); }

  // ---- collectives (same order on every rank) ----------------------------------------------
  WorkPtr all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum, CallerTag tag = {});  // in place
  WorkPtr all_reduce(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::sum, CallerTag tag = {});
  // in (n) on every rank → out (n) on `root` only (in place when in is out); the other ranks'
  // out is not written.
  WorkPtr reduce(const Tensor& in, const Tensor& out, int root, ReduceOp op = ReduceOp::sum, CallerTag tag = {});
  // in (size·n) → out (n)
  WorkPtr reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::sum, CallerTag tag = {});
  // in (n) → out (size·n)
  WorkPtr all_gather(const Tensor& in, const Tensor& out, CallerTag tag = {});
  WorkPtr broadcast(const Tensor& t, int root, CallerTag tag = {});  // in place; t (n) on every rank
  WorkPtr barrier(CallerTag tag = {});
  // Sub-groups: ranks with the same color form one, ordered by (key, rank). color < 0: this rank
  // joins none and gets nullptr. Collective over this communicator; blocks within the timeout.
  // The child inherits timeout, options (with debug mode as now set) and the deadline diagnoser;
  // name defaults to "<parent>/<color>".
  std::shared_ptr<Communicator> split(int color, int key, const std::string& name = "");

  // ---- point to point ----------------------------------------------------------------------
  WorkPtr send(const Tensor& t, int dst, int tag = 0);
  WorkPtr recv(const Tensor& t, int src, int tag = 0);
  WorkPtr batch_p2p(const std::vector<P2POp>& ops);

  uint64_t collectives_issued() const { return state_->progress().collectives; }

 protected:
  // Validates `options`; keeps a flight recorder of options.flight_recorder_entries operations.
  Communicator(std::shared_ptr<CommState> state, const CommOptions& options);
  const std::shared_ptr<CommState>& state() const { return state_; }
  // Sends `mine` to every rank and returns all ranks' signatures (index = rank), within the
  // timeout. Only called in debug mode.
  virtual std::vector<CollectiveSignature> exchange_signatures(const CollectiveSignature& mine) = 0;

  // Backend entry points: arguments already validated, `seq` assigned.
  // Every tensor here holds at most max_count() elements.
  virtual WorkPtr do_all_reduce(const Tensor& in, const Tensor& out, ReduceOp op, uint64_t seq) = 0;
  virtual WorkPtr do_reduce(const Tensor& in, const Tensor& out, int root, ReduceOp op, uint64_t seq) = 0;
  virtual WorkPtr do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, uint64_t seq) = 0;
  virtual WorkPtr do_all_gather(const Tensor& in, const Tensor& out, uint64_t seq) = 0;
  virtual WorkPtr do_broadcast(const Tensor& t, int root, uint64_t seq) = 0;
  virtual WorkPtr do_barrier(uint64_t seq) = 0;
  virtual std::shared_ptr<Communicator> do_split(int color, int key, const std::string& name) = 0;
  virtual WorkPtr do_batch_p2p(const std::vector<P2POp>& ops, const std::string& op_name, uint64_t seq) = 0;

 private:
  void check_usable(const char* op) const;
  void check_tensor(const Tensor& t, const char* op, const char* what) const;
  // The signature check (debug mode) and the seq; then the flight recorder's entry (`elem_size`
  // bytes per element): returns {seq, entry id}.
  std::pair<uint64_t, uint64_t> begin_collective(const CollectiveSignature& mine, int64_t elem_size);
  // Operations above max_count() elements as several backend calls (communicator_chunks.cpp).
  WorkPtr chunked_all_reduce(const Tensor& in, const Tensor& out, ReduceOp op, uint64_t seq);
  WorkPtr chunked_reduce(const Tensor& in, const Tensor& out, int root, ReduceOp op, uint64_t seq);
  WorkPtr chunked_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, uint64_t seq);
  WorkPtr chunked_all_gather(const Tensor& in, const Tensor& out, uint64_t seq);
  WorkPtr chunked_broadcast(const Tensor& t, int root, uint64_t seq);
  std::vector<P2POp> chunked_p2p(const std::vector<P2POp>& ops) const;
  // Records what `w` waits for (for the timeout diagnosis) and its flight recorder entries
  // [first, first + n), and returns it.
  WorkPtr awaiting(WorkPtr w, Awaited a, uint64_t first, uint32_t n) const;
  std::shared_ptr<CommState> state_;
  CommOptions options_;
  bool debug_ = false;
};

}  // namespace st::comm
