// One pipeline stage's planned memory (see the header; every term is named and justified in
// memory_plan.h).
#include "runtime/plan/stage_memory.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/parallel/grad_reducer.h"
#include "runtime/parallel/parameter_sharding.h"
#include "runtime/parallel/tp_shard.h"
#include "tensor/memory_category.h"

namespace st::runtime {
namespace {

double numel(const Shape& s) {
  double n = 1;
  for (int64_t d : s) n *= static_cast<double>(d);
  return n;
}

// Elements of one layer a tp rank holds (its shards by the family's rule); a name already in
// `seen` (a weight tied to a layer of the same stage) counts once.
double layer_elements(const LayerInfo& layer, const ShardRule& rule, int64_t tp, std::set<std::string>& seen) {
  double n = 0;
  for (const auto& [name, shape] : layer.params)
    if (seen.insert(name).second)
      n += rule && tp > 1 ? numel(shard_shape(shape, rule(name), static_cast<int>(tp))) : numel(shape);
  return n;
}

// ZeRO-3's gathered parameters on stage s, in elements (runtime/parallel/zero3.h): a unit per
// layer, a weight two of the stage's layers share a unit of its own, held gathered through the
// backward between them; at most two consecutive layers' units at once (the running one and the
// prefetched one), besides that tied weight.
struct Zero3Gathers {
  double gathered = 0, tied = 0, largest_unit = 0;
  std::vector<double> own;  // per layer of the stage, in order: its own unit (the tied weight apart)
};
Zero3Gathers zero3_gathers(const ModelDescription& d, const Partition& part, int s, const PlanLayout& l,
                           const ShardRule& rule) {
  std::vector<std::map<std::string, double>> layers;  // name → elements (a tp rank's shard)
  std::map<std::string, int> uses;
  for (const LayerRange& r : stage_chunks(part, s, static_cast<int>(l.pp)))
    for (int i = r.begin; i < r.end; ++i) {
      std::map<std::string, double> m;
      for (const auto& [name, shape] : d.layers[static_cast<size_t>(i)].params) {
        m[name] = rule && l.tp > 1 ? numel(shard_shape(shape, rule(name), static_cast<int>(l.tp))) : numel(shape);
        ++uses[name];
      }
      layers.push_back(std::move(m));
    }
  Zero3Gathers g;
  std::map<std::string, double> tied;
  for (const auto& m : layers)
    for (const auto& [name, n] : m)
      if (uses[name] > 1) tied[name] = n;
  for (const auto& [name, n] : tied) g.tied += n, g.largest_unit = std::max(g.largest_unit, n);
  for (size_t i = 0; i < layers.size(); ++i) {
    std::map<std::string, double> now = tied;
    double own = 0;
    for (const auto& [name, n] : layers[i]) now[name] = n, own += tied.count(name) ? 0 : n;
    if (i + 1 < layers.size()) now.insert(layers[i + 1].begin(), layers[i + 1].end());
    double sum = 0;
    for (const auto& [name, n] : now) sum += n;
    g.gathered = std::max(g.gathered, sum);
    g.largest_unit = std::max(g.largest_unit, own);
    g.own.push_back(own);
  }
  return g;
}

// The DP reducer's buckets over a stage's parameters (`sizes`: elements in registration order,
// a tied weight once), as GradReducer::lay_out cuts them: reverse registration order, the first
// bucket ≤ 1 MiB, the others ≤ --bucket-mb, and under ZeRO never two owners' parameters in one
// (Zero1: contiguous runs balanced by bytes, partition_balanced; fewer parameters than ranks:
// one each). `e` the gradients' bytes.
struct Buckets {
  double count = 0, largest = 0;  // buckets; the largest's elements
  double own = 0;                 // ZeRO: the largest owner's run, elements
};
Buckets reducer_buckets(const std::vector<double>& sizes, double e, const PlanLayout& l) {
  const int n = static_cast<int>(sizes.size()), dp = l.zero >= 1 ? static_cast<int>(l.dp) : 1;
  std::vector<int> owner(static_cast<size_t>(n), 0);
  if (dp > 1 && n >= dp) {
    std::vector<double> costs;
    for (double x : sizes) costs.push_back(x * e);
    const Partition part = partition_balanced(costs, dp);
    for (int r = 0; r < dp; ++r)
      for (int k = part.begin(r); k < (r + 1 < dp ? part.begin(r + 1) : n); ++k) owner[static_cast<size_t>(k)] = r;
  } else if (dp > 1) {
    for (int k = 0; k < n; ++k) owner[static_cast<size_t>(k)] = k;
  }
  Buckets b;
  std::map<int, double> runs;
  double bytes = 0, numel = 0, cap = 1024.0 * 1024;
  int head = -1;
  for (int k = n; k-- > 0;) {
    const double nb = sizes[static_cast<size_t>(k)] * e;
    runs[owner[static_cast<size_t>(k)]] += sizes[static_cast<size_t>(k)];
    if (head < 0 || bytes + nb > cap || owner[static_cast<size_t>(head)] != owner[static_cast<size_t>(k)]) {
      if (head >= 0) cap = l.bucket_mb * 1024 * 1024;
      b.count += 1, head = k, bytes = 0, numel = 0;
    }
    bytes += nb, numel += sizes[static_cast<size_t>(k)];
    b.largest = std::max(b.largest, numel);
  }
  for (const auto& [r, x] : runs) b.own = std::max(b.own, x);
  return b;
}

// The moments of one stage's step (plan_stage): the layers it holds, its fixed terms, then each
// moment's activations, gradients and gathered parameters; the peak is the largest sum.
class StagePlan {
 public:
  StagePlan(const StageInputs& in, int s) : in_(in), l_(in.l), a_(in.a), s_(s) {
    m_.stage = s;
    collect_layers();
    fixed_terms();
  }

  StageMemory run() {
    forward_moments();
    // the backward, at its largest occupancy (the micro-batches' worth of the stage held, the
    // one in backward included) in the first micro-batch's backward, and with grad-accum > 1 in
    // the next one's, every gradient made (one micro-batch fewer held unless the forward's peak
    // came after a backward already)
    backward_moments(n_, false);
    if (l_.grad_accum > 1) backward_moments(accumulated_ ? n_ : std::max(n_ - chunk_share_, chunk_share_), true);
    embedding_end();
    return m_;
  }

 private:
  // Per layer of the stage, in order: its elements and its saved bytes per token of one
  // micro-batch; `sizes_` each parameter's elements in registration order (the DP buckets).
  void collect_layers() {
    const ModelDescription& d = *in_.d;
    const int last_layer = static_cast<int>(d.layers.size()) - 1;
    std::set<std::string> seen;
    for (const LayerRange& r : stage_chunks(in_.part, s_, static_cast<int>(l_.pp)))
      for (int i = r.begin; i < r.end; ++i) {
        const LayerInfo& layer = d.layers[static_cast<size_t>(i)];
        for (const auto& [name, shape] : layer.params) {
          const double k = in_.rule && l_.tp > 1 ? numel(shard_shape(shape, in_.rule(name), static_cast<int>(l_.tp)))
                                                 : numel(shape);
          if (!seen.count(name)) sizes_.push_back(k);
          else tied_elems_ += k;  // its gradient is made at this later layer's backward already
        }
        elems_.push_back(layer_elements(layer, in_.rule, l_.tp, seen));
        const bool block = i != 0 && i != last_layer;
        holds_loss_ = holds_loss_ || i == last_layer;
        holds_embedding_ = holds_embedding_ || i == 0;
        replayed_.push_back(block && l_.recompute);
        blocks_.push_back(block);
        saved_.push_back(i == 0 ? (l_.recompute ? 0 : a_.embedding) : !block ? 0 : l_.recompute ? a_.block_recompute : a_.block);
      }
    L_ = elems_.size();
    for (size_t i = 0; i < L_; ++i) elements_ += elems_[i], saved_all_ += saved_[i];
    const double C = in_.C, e = in_.e;
    // a stage before the last keeps its output per micro-batch for the backward of what it sent;
    // the last keeps the loss's saved tensors
    saved_all_ += s_ + 1 < l_.pp ? C * e : 0;
    saved_all_ += holds_loss_ ? a_.loss_saved : 0;
    // a later stage's received input is its first block's saved input; a stage of the Llama head
    // alone keeps it for the final RMSNorm's backward beside the norm's output the loss counts
    // (measured: pp 4 GPipe m 4, C 32, its last stage; GPT-2's head stage is exact without it)
    saved_all_ += s_ > 0 && L_ > 0 && !blocks_[0] && in_.decoder && !classic_block(*d.decoder) ? C * e : 0;
  }

  // The parameters, gradients, optimizer state, in-flight count and comm buffers of the stage.
  void fixed_terms() {
    const double e = in_.e, dp = static_cast<double>(l_.dp);
    z3_ = l_.zero >= 3 ? zero3_gathers(*in_.d, in_.part, s_, l_, in_.rule) : Zero3Gathers{};
    const PrecisionPolicy policy = l_.policy();
    comm_e_ = static_cast<double>(dtype_size(policy.grad_comm));
    m_.params = elements_ * e * (l_.zero >= 3 ? 1 / dp : 1) + z3_.gathered * e;
    // ZeRO-3 (runtime/parallel/zero3.h): beside the shards, the tied weight's full gradient (made
    // in the head's backward, held to the embedding's), the full gradients of the unit whose
    // backward runs, and the unit reduced before it still in flight — its comm buffer and
    // received shard in the comm dtype — until this unit's own reduce completes it (then the
    // received shard cast to e when the comm dtype differs)
    z3_shards_ = elements_ * e / dp;
    const double z3_backward = l_.zero >= 3 ? (z3_.tied + z3_.largest_unit) * e + z3_in_flight(z3_.largest_unit) +
                                                  (comm_e_ != e ? z3_.largest_unit / dp * e : 0)
                                            : 0;
    // the DP reducer (zero < 3): its buckets (grad_reducer.h), cut by owner under ZeRO-1/2
    const Buckets bk = l_.dp > 1 && l_.zero < 3 ? reducer_buckets(sizes_, e, l_) : Buckets{};
    // ZeRO-2 (shard_gradients): a rank keeps its own run's buckets; another owner's gradients are
    // the engine's while backward makes them (with grad-accum > 1 all of them, kept to the last
    // micro-batch), then a bucket of their own while reduced, kShardWindow at most in flight.
    // Beside its own run a rank so holds, once backward has made gradients for other owners:
    // the window's buckets, the one launching with the engine's gradients copied into it, and
    // the tied wte's gradient (made at the head, its bucket final only at the embedding); with a
    // comm dtype of its own the cast buffers stand in for the window (two buckets in all beside
    // them), and only around a bucket's launch: by the next block's backward its reduce is done
    // (the cast path) — without the cast the buffers stay until a later hook retires them.
    // Measured on the CPU: C 64 fp32 dp 4 (window + 1), C 256 bf16 over f32 dp 4 (2).
    z2_own_ = l_.zero == 2 ? bk.own * e : 0;
    z2_cast_ = policy.casts_gradients();
    const double z2_window = z2_cast_ ? 2 : static_cast<double>(kShardWindow) + 1;
    z2_backward_ = l_.grad_accum > 1 ? elements_ * e
                                     : z2_own_ + std::min(elements_ - bk.own, z2_window * bk.largest + tied_elems_) * e;
    m_.grads = l_.zero >= 3 ? z3_shards_ + z3_backward : l_.zero == 2 ? z2_backward_ : elements_ * e;
    m_.optim = elements_ * (in_.master + in_.state) * (l_.zero >= 1 ? 1 / dp : 1);
    m_.in_flight = l_.pp > 1 ? in_flight_bound(l_.schedule, s_, static_cast<int>(l_.pp), static_cast<int>(l_.grad_accum),
                                               static_cast<int>(l_.virtual_stages))
                             : 1;
    chunk_share_ = l_.virtual_stages > 1 ? 1.0 / static_cast<double>(l_.virtual_stages) : 1.0;
    n_ = static_cast<double>(m_.in_flight) * chunk_share_;  // micro-batches' worth of this stage held
    // the reducer's cast buffers, made with its buckets: min(2, buckets) of the largest bucket
    if (l_.dp > 1 && l_.zero < 3 && policy.casts_gradients())
      m_.comm_dp = std::min(2.0, bk.count) * bk.largest * comm_e_;
    // p2p: the gradient of its output, received ((B, T/tp, C) under sequence parallelism)
    if (l_.pp > 1 && s_ + 1 < l_.pp)
      m_.comm_p2p = in_.tokens * in_.C * e / (l_.sequence_parallel && l_.tp > 1 ? l_.tp : 1);
    m_.comm = m_.comm_dp + m_.comm_p2p;
    // an earlier micro-batch's backward ran before the forward's peak: without a pipeline, or
    // under 1F1B / interleaved once the micro-batches outnumber those in flight (GPipe runs
    // every forward first)
    accumulated_ = l_.grad_accum > 1 && (l_.pp == 1 || (l_.schedule != Schedule::gpipe && l_.grad_accum > m_.in_flight));
    fixed_ = m_.params + m_.optim + m_.comm;
    all_ = elements_ * e;
    // the gradients during the forward: the DP buckets (dp > 1, from the step's start), ZeRO-2's
    // own run, ZeRO-3's shards; all of them once an earlier micro-batch's backward made them
    g_forward_ = l_.zero >= 3   ? (l_.dp > 1 ? z3_shards_ : 0)
                 : l_.zero == 2 ? z2_own_ + (accumulated_ ? all_ - z2_own_ : 0)
                                : (l_.dp > 1 || accumulated_ ? all_ : 0);
    out_saved_ = s_ + 1 < l_.pp ? in_.C * e : 0;  // the stage's output, until its backward is over
    m_.activations = 0, m_.peak = 0;
  }

  // A moment: its activations and the gradients and parameters in existence then.
  void moment(double act, double grads, double params) {
    m_.activations = std::max(m_.activations, act);
    m_.peak = std::max(m_.peak, fixed_ - m_.params + params + act + grads);
  }
  double z3_in_flight(double unit) const { return unit * (1 + 1 / static_cast<double>(l_.dp)) * comm_e_; }
  // ZeRO-3's gathered units while layer j's backward runs: its own, the one before it
  // (prefetched) and the tied weight — fewer than the largest pair the parameters' peak counts
  double params_at(size_t j) const {
    if (l_.zero < 3) return m_.params;
    return z3_shards_ + (z3_.tied + z3_.own[j] + (j > 0 ? z3_.own[j - 1] : 0)) * in_.e;
  }
  // The gradients while layer j's backward runs (`made`: once it made its own), in the first
  // micro-batch's backward or (`later`) a later one's, when every gradient exists.
  double g_backward(size_t j, bool made, bool later) const {
    const double e = in_.e;
    if (l_.zero >= 3)
      return z3_shards_ + z3_.tied * e + (j + 1 < L_ ? z3_in_flight(z3_.own[j + 1]) : 0) + (made ? z3_.own[j] * e : 0);
    // made by this micro-batch's backward so far (a tied weight's at its later layer)
    double so_far = made ? elems_[j] * e : 0;
    for (size_t i = j + 1; i < L_; ++i) so_far += elems_[i] * e;
    if (j + 1 < L_ && !(j == 0 && made)) so_far += tied_elems_ * e;
    if (l_.zero == 2)
      return later || accumulated_ ? z2_backward_
             : l_.grad_accum > 1   ? std::min(all_, z2_own_ + so_far)
                                   : z2_own_ + (made || !z2_cast_ ? std::min(so_far, z2_backward_ - z2_own_) : 0);
    return l_.dp > 1 || later || accumulated_ ? all_ : so_far;
  }
  // The start of block j's backward: its first weight gradient made beside its temporary (a
  // .grad of its own where the gradients are not all there already).
  double g_start(size_t j, bool later) const {
    const bool there = l_.zero < 2 && (l_.dp > 1 || later || accumulated_);
    return g_backward(j, false, later) + (there ? 0 : a_.block_start_weight * in_.e);
  }

  // The end of the forward (the loss and its gradient on the last stage) and, at cp > 1, the
  // last block's ring forward.
  void forward_moments() {
    const double last_unit = l_.zero >= 3 ? z3_shards_ + (z3_.tied + z3_.own[L_ - 1]) * in_.e : m_.params;  // ZeRO-3: the last layer's unit
    moment(in_.tokens * (n_ * saved_all_ + (holds_loss_ ? a_.loss_transient : 0)), g_forward_, last_unit);
    // cp > 1: the ring's buffers beside what the blocks saved (the micro-batch's own block not
    // yet saved: an upper bound by less than one block's saved bytes)
    if (a_.ring > 0 && n_ > 0) moment(in_.tokens * (n_ * saved_all_ + a_.ring), g_forward_, last_unit);
  }

  // One micro-batch's backward with `held` micro-batches' worth of the stage held.
  void backward_moments(double held, bool later) {
    const double e = in_.e, tokens = in_.tokens;
    const double others = (held - chunk_share_) * saved_all_;
    // the head's backward: the logits gone, their gradient, its input's and (once) the head
    // weight's gradient before it is copied into .grad — the larger moment when C is large
    // against the micro-batch's tokens (the unfused head; the chunked head's is below)
    if (holds_loss_ && in_.decoder && a_.head.grad == 0)
      moment(tokens * (held * saved_all_ - a_.logits + a_.head_backward) + a_.head_weight_grad,
             l_.zero >= 3 ? z3_shards_ + (z3_.tied + z3_.own[L_ - 1]) * e + (later ? z3_in_flight(z3_.own[0]) : 0)
                          : std::max(g_forward_, g_backward(L_ - 1, true, later)),
             params_at(L_ - 1));
    // the chunked head's backward: wte's gradient made beside the one the loss hands out
    if (holds_loss_ && a_.head.grad > 0)
      moment(tokens * (held * saved_all_ + a_.head.backward),
             std::max(g_forward_, later ? g_backward(L_ - 1, true, true) : a_.head.grad), params_at(L_ - 1));
    // each block's backward, from its start (the loss's saved tensors of that micro-batch gone
    // on the last stage, the stage's later layers' saved tensors gone) to its end: its first
    // GEMM's weight gradient made (the block's last; a temporary beside the .grad it is copied
    // into), the block's own saved tensors gone but its input's edge and the gradient flowing
    double before = 0;  // saved bytes per token of the layers before j in this micro-batch
    for (size_t j = 0; j < L_; ++j) {
      if (blocks_[j]) {
        if (!replayed_[j])
          moment(tokens * (others + out_saved_ + before + saved_[j] + a_.block_backward) + a_.block_start_weight * a_.weight_temp,
                 g_start(j, later), params_at(j));
        moment(tokens * (others + out_saved_ + before + a_.block_end) + a_.block_end_weight * a_.weight_temp,
               g_backward(j, true, later), params_at(j));
      }
      before += saved_[j];
    }
    // recompute: each block's replay in backward, its inputs up to it held, the gradients of
    // the layers after it made
    double inputs = 0;
    for (size_t i = 0; i < L_; ++i)
      if (replayed_[i]) inputs += a_.block_recompute;
    for (size_t i = L_; i-- > 0;) {  // backward order: the last layer first
      if (!replayed_[i]) continue;
      moment(tokens * (others + inputs + a_.replay) + a_.block_start_weight * a_.weight_temp, g_start(i, later), params_at(i));
      inputs -= a_.block_recompute;
    }
  }

  // The end of the backward: every gradient made, and the embedding's gradient of the tied wte
  // before it is added to the head's — the peak when the activations are small against the
  // weights (few tokens per micro-batch); ZeRO-3's gradient term already holds wte's.
  void embedding_end() {
    if (!in_.decoder || !holds_embedding_ || l_.zero >= 3) return;
    m_.activations = std::max(m_.activations, a_.embedding_grad);  // made in the backward's scope
    m_.peak = std::max(m_.peak, fixed_ + m_.grads + a_.embedding_grad);
  }

  const StageInputs& in_;
  const PlanLayout& l_;
  const ActivationCoefficients& a_;
  const int s_;
  StageMemory m_;
  // the stage's layers (collect_layers)
  std::vector<double> elems_, saved_, sizes_;
  std::vector<bool> replayed_, blocks_;
  double tied_elems_ = 0;  // a weight two of the stage's layers share (the GPT's wte), elements
  bool holds_loss_ = false, holds_embedding_ = false;
  size_t L_ = 0;
  double elements_ = 0, saved_all_ = 0;
  // the fixed terms (fixed_terms)
  Zero3Gathers z3_;
  double comm_e_ = 0, z3_shards_ = 0, z2_own_ = 0, z2_backward_ = 0, chunk_share_ = 1, n_ = 0;
  bool z2_cast_ = false, accumulated_ = false;
  double fixed_ = 0, all_ = 0, g_forward_ = 0, out_saved_ = 0;
};

}  // namespace

StageMemory plan_stage(const StageInputs& in, int s) { return StagePlan(in, s).run(); }

}  // namespace st::runtime
