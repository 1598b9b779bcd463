#include "runtime/pipeline/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <sstream>

#include "tensor/error.h"

namespace st::runtime {

bool is_comm(PipeOp op) { return op != PipeOp::Forward && op != PipeOp::Backward; }
bool is_send(PipeOp op) { return op == PipeOp::SendAct || op == PipeOp::SendGrad; }

const char* pipe_op_name(PipeOp op) {
  switch (op) {
    case PipeOp::RecvAct: return "RA";
    case PipeOp::Forward: return "F";
    case PipeOp::SendAct: return "SA";
    case PipeOp::RecvGrad: return "RG";
    case PipeOp::Backward: return "B";
    case PipeOp::SendGrad: return "SG";
  }
  return "?";
}

std::string to_string(const PipeAction& a) {
  std::string s = pipe_op_name(a.op);
  s += std::to_string(a.micro);
  if (a.chunk > 0) s.append(".").append(std::to_string(a.chunk));
  return s;
}

std::string to_string(const std::vector<PipeStep>& steps) {
  std::ostringstream o;
  bool first = true;
  for (const PipeStep& st : steps) {
    if (!st.comm.empty()) {
      o << (first ? "" : " ") << "[";
      for (size_t i = 0; i < st.comm.size(); ++i) o << (i ? " " : "") << to_string(st.comm[i]);
      o << "]";
      first = false;
    }
    if (st.compute) {
      o << (first ? "" : " ") << to_string(*st.compute);
      first = false;
    }
  }
  return o.str();
}

namespace {

void check_args(Schedule kind, int stage, int stages, int m, int v) {
  if (stages < 1 || stage < 0 || stage >= stages || m < 1 || v < 1)
    ST_THROW(ValueError, "pipeline schedule: stage " << stage << " of " << stages << " with " << m
                                                     << " micro-batches and " << v << " chunks is not valid");
  if (kind == Schedule::interleaved) {
    ST_CHECK(v >= 2 && stages >= 2, ValueError,
             "interleaved schedule: needs 2 stages or more and 2 chunks per stage or more, got "
                 << stages << " stages of " << v << " chunks");
    ST_CHECK(m % stages == 0, ValueError,
             "interleaved schedule: " << m << " micro-batches is not a multiple of the " << stages << " stages");
  } else {
    ST_CHECK(v == 1, ValueError, to_string(kind) << " schedule: one chunk per stage, got " << v);
  }
}

// Collects a stage's actions: communication joins the open group, a compute action closes it.
// A group's ops are ordered activations first, then gradients (see the header).
struct Builder {
  int stage, stages, chunks;
  std::vector<PipeStep> out;
  std::vector<PipeAction> group;
  bool first_chunk(int c) const { return stage == 0 && c == 0; }                     // model chunk 0
  bool last_chunk(int c) const { return stage == stages - 1 && c == chunks - 1; }    // the model's last
  void recv_act(int mb, int c = 0) {
    if (!first_chunk(c)) group.push_back({PipeOp::RecvAct, mb, c});
  }
  void send_act(int mb, int c = 0) {
    if (!last_chunk(c)) group.push_back({PipeOp::SendAct, mb, c});
  }
  void recv_grad(int mb, int c = 0) {
    if (!last_chunk(c)) group.push_back({PipeOp::RecvGrad, mb, c});
  }
  void send_grad(int mb, int c = 0) {
    if (!first_chunk(c)) group.push_back({PipeOp::SendGrad, mb, c});
  }
  void compute(PipeOp op, int mb, int c = 0) {
    out.push_back({take_group(), PipeAction{op, mb, c}});
  }
  std::vector<PipeStep> finish() {
    if (!group.empty()) out.push_back({take_group(), std::nullopt});
    return std::move(out);
  }
  std::vector<PipeAction> take_group() {
    auto is_grad = [](const PipeAction& a) { return a.op == PipeOp::RecvGrad || a.op == PipeOp::SendGrad; };
    std::stable_sort(group.begin(), group.end(),
                     [&](const PipeAction& a, const PipeAction& b) { return !is_grad(a) && is_grad(b); });
    return std::exchange(group, {});
  }
};

std::vector<PipeStep> gpipe(int stage, int stages, int m) {
  Builder b{stage, stages, 1, {}, {}};
  for (int mb = 0; mb < m; ++mb) {
    b.recv_act(mb);
    b.compute(PipeOp::Forward, mb);
    b.send_act(mb);
  }
  for (int mb = m - 1; mb >= 0; --mb) {
    b.recv_grad(mb);
    b.compute(PipeOp::Backward, mb);
    b.send_grad(mb);
  }
  return b.finish();
}

std::vector<PipeStep> one_f_one_b(int stage, int stages, int m) {
  Builder b{stage, stages, 1, {}, {}};
  const int warmup = std::min(stages - stage - 1, m);
  const int steady = m - warmup;
  int next_f = 0, next_b = 0;
  for (int i = 0; i < warmup; ++i) {
    b.recv_act(next_f);
    b.compute(PipeOp::Forward, next_f);
    b.send_act(next_f);
    ++next_f;
  }
  if (steady > 0) b.recv_act(next_f);
  for (int i = 0; i < steady; ++i) {
    b.compute(PipeOp::Forward, next_f);
    // this output goes out in the group that brings the oldest in-flight micro-batch's gradient
    b.send_act(next_f);
    ++next_f;
    b.recv_grad(next_b);
    b.compute(PipeOp::Backward, next_b);
    // the input gradient goes out in the group that brings the next activation
    b.send_grad(next_b);
    ++next_b;
    if (i + 1 < steady) b.recv_act(next_f);
  }
  while (next_b < m) {
    b.recv_grad(next_b);
    b.compute(PipeOp::Backward, next_b);
    b.send_grad(next_b);
    ++next_b;
  }
  return b.finish();
}

// Megatron-LM's forward_backward_pipelining_with_interleaving (without overlapped p2p): the k-th
// forward of a stage is micro-batch (k / pv)·p + k % p on chunk (k % pv) / p, the k-th backward the
// same micro-batch on chunk v − 1 − (k % pv) / p. Every receive is posted in the group right
// before the compute that needs it, which on the first and the last stage is exactly Megatron's
// recv_prev / recv_next rule (both skip a receive when the peer's concurrent action is on the
// boundary chunk).
std::vector<PipeStep> interleaved(int stage, int stages, int m, int v) {
  Builder b{stage, stages, v, {}, {}};
  const int p = stages, total = m * v;
  auto mb_of = [&](int k) { return (k / (p * v)) * p + k % p; };
  auto fchunk = [&](int k) { return (k % (p * v)) / p; };
  auto bchunk = [&](int k) { return v - 1 - (k % (p * v)) / p; };
  const int warmup = std::min(2 * (p - stage - 1) + (v - 1) * p, total);
  const int steady = total - warmup;
  b.recv_act(mb_of(0), fchunk(0));
  for (int k = 0; k < warmup; ++k) {
    b.compute(PipeOp::Forward, mb_of(k), fchunk(k));
    b.send_act(mb_of(k), fchunk(k));
    if (k + 1 < total) b.recv_act(mb_of(k + 1), fchunk(k + 1));
    if (k + 1 == warmup && steady > 0) b.recv_grad(mb_of(0), bchunk(0));
  }
  for (int i = 0; i < steady; ++i) {
    const int f = warmup + i;
    b.compute(PipeOp::Forward, mb_of(f), fchunk(f));
    b.compute(PipeOp::Backward, mb_of(i), bchunk(i));
    b.send_act(mb_of(f), fchunk(f));
    b.send_grad(mb_of(i), bchunk(i));
    if (f + 1 < total) b.recv_act(mb_of(f + 1), fchunk(f + 1));
    b.recv_grad(mb_of(i + 1), bchunk(i + 1));
  }
  if (steady == 0) b.recv_grad(mb_of(0), bchunk(0));
  for (int k = steady; k < total; ++k) {
    b.compute(PipeOp::Backward, mb_of(k), bchunk(k));
    b.send_grad(mb_of(k), bchunk(k));
    if (k + 1 < total) b.recv_grad(mb_of(k + 1), bchunk(k + 1));
  }
  return b.finish();
}

}  // namespace

std::vector<PipeStep> make_schedule(Schedule kind, int stage, int stages, int m, int v) {
  check_args(kind, stage, stages, m, v);
  switch (kind) {
    case Schedule::gpipe: return gpipe(stage, stages, m);
    case Schedule::one_f_one_b: return one_f_one_b(stage, stages, m);
    case Schedule::interleaved: return interleaved(stage, stages, m, v);
  }
  ST_THROW(ValueError, "pipeline schedule " << static_cast<int>(kind) << " is not known");
}

int in_flight_bound(Schedule kind, int stage, int stages, int m, int v) {
  check_args(kind, stage, stages, m, v);
  switch (kind) {
    case Schedule::gpipe: return m;
    case Schedule::one_f_one_b: return std::min(stages - stage, m);
    case Schedule::interleaved: return std::min(2 * (stages - stage - 1) + (v - 1) * stages + 1, m * v);
  }
  ST_THROW(ValueError, "pipeline schedule " << static_cast<int>(kind) << " is not known");
}

int max_in_flight(const std::vector<PipeStep>& steps) {
  // a (micro-batch, chunk) pair is held from its first action to its last; counted after each
  // step's group and after its compute action, as the executor counts
  using Key = std::pair<int, int>;
  std::map<Key, size_t> last;  // pair → position of its last action
  size_t i = 0;
  for (const PipeStep& s : steps) {
    for (const PipeAction& a : s.comm) last[{a.micro, a.chunk}] = i++;
    if (s.compute) last[{s.compute->micro, s.compute->chunk}] = i++;
  }
  std::set<Key> held;
  size_t peak = 0;
  i = 0;
  auto apply = [&](const PipeAction& a) {
    const Key k{a.micro, a.chunk};
    if (last[k] == i++)
      held.erase(k);
    else
      held.insert(k);
  };
  for (const PipeStep& s : steps) {
    for (const PipeAction& a : s.comm) apply(a);
    peak = std::max(peak, held.size());
    if (s.compute) apply(*s.compute);
    peak = std::max(peak, held.size());
  }
  return static_cast<int>(peak);
}

PipelinePlan make_plan(Schedule kind, int stage, int stages, int m, int v) {
  return {make_schedule(kind, stage, stages, m, v), in_flight_bound(kind, stage, stages, m, v)};
}

PipePeer pipe_peer(const PipeAction& a, int stage, int stages) {
  switch (a.op) {
    case PipeOp::SendAct:
    case PipeOp::RecvGrad:  // the next model chunk
      return {(stage + 1) % stages, a.chunk + (stage == stages - 1 ? 1 : 0)};
    case PipeOp::RecvAct:
    case PipeOp::SendGrad:  // the previous model chunk
      return {(stage + stages - 1) % stages, a.chunk - (stage == 0 ? 1 : 0)};
    default: break;
  }
  ST_THROW(ValueError, "pipe_peer: " << to_string(a) << " is not a communication action");
}

int pipe_tag(const PipeAction& a, int stage, int stages, int chunks) {
  const bool grad = a.op == PipeOp::RecvGrad || a.op == PipeOp::SendGrad;
  const int recv_chunk = is_send(a.op) ? pipe_peer(a, stage, stages).chunk : a.chunk;
  return 2 * (a.micro * chunks + recv_chunk) + (grad ? 1 : 0);
}

int max_pipeline_micro_batches(int chunks) { return kPipeShapeTag / (2 * chunks); }

}  // namespace st::runtime
