// The memory planner's closed forms (see the header for every term and where it comes from).
#include "runtime/plan/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "runtime/parallel/grad_reducer.h"
#include "runtime/parallel/parameter_sharding.h"
#include "runtime/parallel/tp_shard.h"
#include "runtime/pipeline/stage_model.h"
#include "runtime/plan/activation_bytes.h"
#include "runtime/plan/memory_check.h"
#include "runtime/setup/model_registry.h"
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

}  // namespace

PlanLayout plan_layout(const TrainConfig& cfg, int64_t dp) {
  PlanLayout l;
  l.dp = dp;
  l.cp = cfg.cp;
  l.tp = cfg.tp;
  l.pp = cfg.pp;
  l.zero = zero_stage_in_effect(cfg.zero, dp * cfg.cp);  // ZeRO shards over dp × cp
  l.schedule = cfg.schedule;
  l.virtual_stages = cfg.virtual_stages;
  l.micro_batch = cfg.micro_batch;
  l.grad_accum = cfg.grad_accum;
  l.recompute = cfg.recompute;
  l.precision = cfg.precision;
  l.grad_comm_dtype = cfg.grad_comm_dtype;
  l.optimizer = cfg.optimizer;
  l.partition = cfg.partition == PartitionKind::profile ? PartitionKind::params : cfg.partition;
  l.bucket_mb = cfg.bucket_mb;
  l.device = cfg.device;
  l.chunked_head = cfg.chunked_head;
  l.sequence_parallel = cfg.sequence_parallel == 1 && cfg.tp > 1;
  l.snapshot_block = keeps_snapshot_block(cfg);
  return l;
}

double local_tokens(const PlanLayout& l, int64_t seq_len) {
  return static_cast<double>(l.micro_batch * seq_len) / static_cast<double>(std::max<int64_t>(l.cp, 1));
}

bool head_is_chunked(const PlanLayout& l) { return l.chunked_head && l.tp == 1 && l.zero < 3; }

double MemoryPlan::max_peak() const {
  double p = 0;
  for (const StageMemory& s : stages) p = std::max(p, s.peak);
  return p;
}

MemoryPlan plan_memory(const nlohmann::json& entry, int64_t seq_len, const PlanLayout& layout) {
  // every dp term below counts the ranks that sum the gradients (and ZeRO shards over): dp × cp
  PlanLayout l = layout;
  l.dp = layout.dp * layout.cp;
  MemoryPlan plan;
  const std::string family = entry.value("family", std::string());
  const ModelFactory& f = model_factory(family);
  const ModelDescription d = describe_model(entry, seq_len);
  const ShardRule rule = f.shard_rule && l.tp > 1 ? f.shard_rule(entry.at("config")) : ShardRule();
  const int pieces = static_cast<int>(l.pp * l.virtual_stages);
  const Partition part = choose_partition(l.partition, d, pieces);
  // activations from the model's decoder description (DecoderShape); none for another model
  const bool decoder = d.decoder.has_value();
  if (!decoder) plan.notes = "activations are modelled for decoder models only (0 here)";
  const ActivationCoefficients a =
      decoder ? decoder_activations(*d.decoder, static_cast<double>(d.vocab_size), l, local_tokens(l, seq_len))
              : ActivationCoefficients{};
  const ParamBytes pb = param_bytes(l.precision, l.optimizer, l.snapshot_block);  // as the memory check's
  const double e = pb.weight, master = pb.master, state = pb.state + pb.snapshot;
  const double dp = static_cast<double>(l.dp), tokens = local_tokens(l, seq_len);
  const double C = decoder ? static_cast<double>(d.decoder->d_model) : 0.0;
  const int last_layer = static_cast<int>(d.layers.size()) - 1;
  for (int s = 0; s < l.pp; ++s) {
    StageMemory m;
    m.stage = s;
    // per layer of the stage, in order: its elements and its saved bytes per token of one
    // micro-batch; `sizes` each parameter's elements in registration order (the DP buckets)
    std::vector<double> elems, saved, sizes;
    std::vector<bool> replayed, blocks;
    double tied_elems = 0;  // a weight two of the stage's layers share (the GPT's wte), elements
    bool holds_loss = false, holds_embedding = false;
    std::set<std::string> seen;
    for (const LayerRange& r : stage_chunks(part, s, static_cast<int>(l.pp)))
      for (int i = r.begin; i < r.end; ++i) {
        const LayerInfo& layer = d.layers[static_cast<size_t>(i)];
        for (const auto& [name, shape] : layer.params) {
          const double k = rule && l.tp > 1 ? numel(shard_shape(shape, rule(name), static_cast<int>(l.tp))) : numel(shape);
          if (!seen.count(name)) sizes.push_back(k);
          else tied_elems += k;  // its gradient is made at this later layer's backward already
        }
        elems.push_back(layer_elements(layer, rule, l.tp, seen));
        const bool block = i != 0 && i != last_layer;
        holds_loss = holds_loss || i == last_layer;
        holds_embedding = holds_embedding || i == 0;
        replayed.push_back(block && l.recompute);
        blocks.push_back(block);
        saved.push_back(i == 0 ? (l.recompute ? 0 : a.embedding) : !block ? 0 : l.recompute ? a.block_recompute : a.block);
      }
    const size_t L = elems.size();
    double elements = 0, saved_all = 0;
    for (size_t i = 0; i < L; ++i) elements += elems[i], saved_all += saved[i];
    const Zero3Gathers z3 = l.zero >= 3 ? zero3_gathers(d, part, s, l, rule) : Zero3Gathers{};
    // a stage before the last keeps its output per micro-batch for the backward of what it sent;
    // the last keeps the loss's saved tensors
    saved_all += s + 1 < l.pp ? C * e : 0;
    saved_all += holds_loss ? a.loss_saved : 0;
    // a later stage's received input is its first block's saved input; a stage of the Llama head
    // alone keeps it for the final RMSNorm's backward beside the norm's output the loss counts
    // (measured: pp 4 GPipe m 4, C 32, its last stage; GPT-2's head stage is exact without it)
    saved_all += s > 0 && L > 0 && !blocks[0] && decoder && !classic_block(*d.decoder) ? C * e : 0;
    const double comm_e = static_cast<double>(dtype_size(compute_dtype(l.grad_comm_dtype)));
    m.params = elements * e * (l.zero >= 3 ? 1 / dp : 1) + z3.gathered * e;
    // ZeRO-3 (runtime/parallel/zero3.h): beside the shards, the tied weight's full gradient (made
    // in the head's backward, held to the embedding's), the full gradients of the unit whose
    // backward runs, and the unit reduced before it still in flight — its comm buffer and
    // received shard in the comm dtype — until this unit's own reduce completes it (then the
    // received shard cast to e when the comm dtype differs)
    auto z3_in_flight = [&](double unit) { return unit * (1 + 1 / dp) * comm_e; };
    const double z3_shards = elements * e / dp;
    const double z3_backward =
        l.zero >= 3 ? (z3.tied + z3.largest_unit) * e + z3_in_flight(z3.largest_unit) +
                          (comm_e != e ? z3.largest_unit / dp * e : 0)
                    : 0;
    // the DP reducer (zero < 3): its buckets (grad_reducer.h), cut by owner under ZeRO-1/2
    const Buckets bk = l.dp > 1 && l.zero < 3 ? reducer_buckets(sizes, e, l) : Buckets{};
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
    const double z2_own = l.zero == 2 ? bk.own * e : 0;
    const bool z2_cast = compute_dtype(l.grad_comm_dtype) != compute_dtype(l.precision);
    const double z2_window = z2_cast ? 2 : static_cast<double>(kShardWindow) + 1;
    const double z2_backward =
        l.grad_accum > 1 ? elements * e : z2_own + std::min(elements - bk.own, z2_window * bk.largest + tied_elems) * e;
    m.grads = l.zero >= 3 ? z3_shards + z3_backward : l.zero == 2 ? z2_backward : elements * e;
    m.optim = elements * (master + state) * (l.zero >= 1 ? 1 / dp : 1);
    m.in_flight = l.pp > 1 ? in_flight_bound(l.schedule, s, static_cast<int>(l.pp), static_cast<int>(l.grad_accum),
                                             static_cast<int>(l.virtual_stages))
                           : 1;
    const double chunk_share = l.virtual_stages > 1 ? 1.0 / static_cast<double>(l.virtual_stages) : 1.0;
    const double n = static_cast<double>(m.in_flight) * chunk_share;  // micro-batches' worth of this stage held
    // the reducer's cast buffers, made with its buckets: min(2, buckets) of the largest bucket
    if (l.dp > 1 && l.zero < 3 && compute_dtype(l.grad_comm_dtype) != compute_dtype(l.precision))
      m.comm_dp = std::min(2.0, bk.count) * bk.largest * comm_e;
    // p2p: the gradient of its output, received ((B, T/tp, C) under sequence parallelism)
    if (l.pp > 1 && s + 1 < l.pp) m.comm_p2p = tokens * C * e / (l.sequence_parallel && l.tp > 1 ? l.tp : 1);
    m.comm = m.comm_dp + m.comm_p2p;
    // an earlier micro-batch's backward ran before the forward's peak: without a pipeline, or
    // under 1F1B / interleaved once the micro-batches outnumber those in flight (GPipe runs
    // every forward first)
    const bool accumulated = l.grad_accum > 1 && (l.pp == 1 || (l.schedule != Schedule::gpipe && l.grad_accum > m.in_flight));
    const double fixed = m.params + m.optim + m.comm;
    // each moment: its activations and the gradients in existence then; the peak is the largest
    m.activations = 0, m.peak = 0;
    // ZeRO-3's gathered units while layer j's backward runs: its own, the one before it
    // (prefetched) and the tied weight — fewer than the largest pair the parameters' peak counts
    auto params_at = [&](size_t j) {
      if (l.zero < 3) return m.params;
      return elements * e / dp + (z3.tied + z3.own[j] + (j > 0 ? z3.own[j - 1] : 0)) * e;
    };
    auto moment = [&](double act, double grads, double params) {
      m.activations = std::max(m.activations, act);
      m.peak = std::max(m.peak, fixed - m.params + params + act + grads);
    };
    // the gradients during the forward: the DP buckets (dp > 1, from the step's start), ZeRO-2's
    // own run, ZeRO-3's shards; all of them once an earlier micro-batch's backward made them
    const double all = elements * e;
    const double g_forward = l.zero >= 3   ? (l.dp > 1 ? z3_shards : 0)
                             : l.zero == 2 ? z2_own + (accumulated ? all - z2_own : 0)
                                           : (l.dp > 1 || accumulated ? all : 0);
    // the gradients while layer j's backward runs (`made`: once it made its own), in the first
    // micro-batch's backward or (`later`) a later one's, when every gradient exists
    auto g_backward = [&](size_t j, bool made, bool later) {
      if (l.zero >= 3)
        return z3_shards + z3.tied * e + (j + 1 < L ? z3_in_flight(z3.own[j + 1]) : 0) + (made ? z3.own[j] * e : 0);
      // made by this micro-batch's backward so far (a tied weight's at its later layer)
      double so_far = made ? elems[j] * e : 0;
      for (size_t i = j + 1; i < L; ++i) so_far += elems[i] * e;
      if (j + 1 < L && !(j == 0 && made)) so_far += tied_elems * e;
      if (l.zero == 2)
        return later || accumulated ? z2_backward
               : l.grad_accum > 1   ? std::min(all, z2_own + so_far)
                                    : z2_own + (made || !z2_cast ? std::min(so_far, z2_backward - z2_own) : 0);
      return l.dp > 1 || later || accumulated ? all : so_far;
    };
    // the start of block j's backward: its first weight gradient made beside its temporary (a
    // .grad of its own where the gradients are not all there already)
    auto g_start = [&](size_t j, bool later) {
      const bool there = l.zero < 2 && (l.dp > 1 || later || accumulated);
      return g_backward(j, false, later) + (there ? 0 : a.block_start_weight * e);
    };
    const double out_saved = s + 1 < l.pp ? C * e : 0;  // the stage's output, until its backward is over
    // the end of the forward (the loss and its gradient on the last stage)
    moment(tokens * (n * saved_all + (holds_loss ? a.loss_transient : 0)), g_forward,
           l.zero >= 3 ? elements * e / dp + (z3.tied + z3.own[L - 1]) * e : m.params);  // ZeRO-3: the last layer's unit
    // cp > 1: the last block's ring forward, its buffers beside what the blocks saved (the
    // micro-batch's own block not yet saved: an upper bound by less than one block's saved bytes)
    if (a.ring > 0 && n > 0)
      moment(tokens * (n * saved_all + a.ring), g_forward, l.zero >= 3 ? elements * e / dp + (z3.tied + z3.own[L - 1]) * e : m.params);
    // the backward, at its largest occupancy (the micro-batches' worth of the stage held, the
    // one in backward included) in the first micro-batch's backward, and with grad-accum > 1 in
    // the next one's, every gradient made (one micro-batch fewer held unless the forward's peak
    // came after a backward already)
    struct Pass {
      double held;
      bool later;
    };
    std::vector<Pass> passes{{n, false}};
    if (l.grad_accum > 1) passes.push_back({accumulated ? n : std::max(n - chunk_share, chunk_share), true});
    for (const Pass& p : passes) {
      const double others = (p.held - chunk_share) * saved_all;
      // the head's backward: the logits gone, their gradient, its input's and (once) the head
      // weight's gradient before it is copied into .grad — the larger moment when C is large
      // against the micro-batch's tokens (the unfused head; the chunked head's is below)
      if (holds_loss && decoder && a.head.grad == 0)
        moment(tokens * (p.held * saved_all - a.logits + a.head_backward) + a.head_weight_grad,
               l.zero >= 3 ? z3_shards + (z3.tied + z3.own[L - 1]) * e + (p.later ? z3_in_flight(z3.own[0]) : 0)
                           : std::max(g_forward, g_backward(L - 1, true, p.later)),
               params_at(L - 1));
      // the chunked head's backward: wte's gradient made beside the one the loss hands out
      if (holds_loss && a.head.grad > 0)
        moment(tokens * (p.held * saved_all + a.head.backward),
               std::max(g_forward, p.later ? g_backward(L - 1, true, true) : a.head.grad), params_at(L - 1));
      // each block's backward, from its start (the loss's saved tensors of that micro-batch gone
      // on the last stage, the stage's later layers' saved tensors gone) to its end: its first
      // GEMM's weight gradient made (the block's last; a temporary beside the .grad it is copied
      // into), the block's own saved tensors gone but its input's edge and the gradient flowing
      double before = 0;  // saved bytes per token of the layers before j in this micro-batch
      for (size_t j = 0; j < L; ++j) {
        if (blocks[j]) {
          if (!replayed[j])
            moment(tokens * (others + out_saved + before + saved[j] + a.block_backward) + a.block_start_weight * a.weight_temp,
                   g_start(j, p.later), params_at(j));
          moment(tokens * (others + out_saved + before + a.block_end) + a.block_end_weight * a.weight_temp,
                 g_backward(j, true, p.later), params_at(j));
        }
        before += saved[j];
      }
      // recompute: each block's replay in backward, its inputs up to it held, the gradients of
      // the layers after it made
      double inputs = 0;
      for (size_t i = 0; i < L; ++i)
        if (replayed[i]) inputs += a.block_recompute;
      for (size_t i = L; i-- > 0;) {  // backward order: the last layer first
        if (!replayed[i]) continue;
        moment(tokens * (others + inputs + a.replay) + a.block_start_weight * a.weight_temp, g_start(i, p.later), params_at(i));
        inputs -= a.block_recompute;
      }
    }
    // the end of the backward: every gradient made, and the embedding's gradient of the tied wte
    // before it is added to the head's — the peak when the activations are small against the
    // weights (few tokens per micro-batch); ZeRO-3's gradient term already holds wte's
    if (decoder && holds_embedding && l.zero < 3) {
      m.activations = std::max(m.activations, a.embedding_grad);  // made in the backward's scope
      m.peak = std::max(m.peak, fixed + m.grads + a.embedding_grad);
    }
    plan.stages.push_back(m);
  }
  return plan;
}

void register_memory_cap(const TrainConfig& cfg, const nlohmann::json& entry, int64_t seq_len, int64_t dp, int rank) {
  if (cfg.max_memory_gib <= 0) {
    set_memory_cap(0, "");
    return;
  }
  const PlanLayout l = plan_layout(cfg, dp);
  set_memory_cap(static_cast<size_t>(cfg.max_memory_gib * 1024 * 1024 * 1024),
                 memory_plan_line(plan_memory(entry, seq_len, l), l, rank));
}

int stage_of_rank(const PlanLayout& l, int rank) { return static_cast<int>(rank / (l.dp * l.cp * l.tp)); }

std::string memory_plan_table(const MemoryPlan& plan, const PlanLayout& l) {
  auto mib = [](double b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", b / (1 << 20));
    return std::string(buf);
  };
  std::ostringstream o;
  char row[200];
  const bool per_rank = l.world() <= 16;
  std::snprintf(row, sizeof row, "%-7s %5s %9s %10s %10s %10s %10s %8s %10s\n", per_rank ? "rank" : "ranks", "stage",
                "in-flight", "params", "grads", "optim", "act peak", "comm", "peak");
  o << "planned memory per rank (MiB):\n" << row;
  for (int r = 0; r < (per_rank ? l.world() : l.pp); ++r) {
    const int s = per_rank ? stage_of_rank(l, r) : r;
    const StageMemory& m = plan.stages[static_cast<size_t>(s)];
    std::string who = std::to_string(r);
    const int64_t stage_ranks = l.dp * l.cp * l.tp;
    if (!per_rank) who = std::to_string(s * stage_ranks) + "-" + std::to_string((s + 1) * stage_ranks - 1);
    std::snprintf(row, sizeof row, "%-7s %5d %9lld %10s %10s %10s %10s %8s %10s\n", who.c_str(), s,
                  static_cast<long long>(m.in_flight), mib(m.params).c_str(), mib(m.grads).c_str(),
                  mib(m.optim).c_str(), mib(m.activations).c_str(), mib(m.comm).c_str(), mib(m.peak).c_str());
    o << row;
  }
  if (!plan.notes.empty()) o << "note: " << plan.notes << "\n";
  return o.str();
}

std::string memory_plan_line(const MemoryPlan& plan, const PlanLayout& l, int rank) {
  const StageMemory& m = plan.stages[static_cast<size_t>(stage_of_rank(l, rank))];
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "the plan for this layout (dp %lld tp %lld pp %lld zero %d%s): %.1f MiB at peak on this rank "
                "(params %.1f, grads %.1f, optim %.1f, activations %.1f, comm %.1f MiB)",
                static_cast<long long>(l.dp), static_cast<long long>(l.tp), static_cast<long long>(l.pp), l.zero,
                l.cp > 1 ? (" cp " + std::to_string(l.cp)).c_str() : "", m.peak / (1 << 20), m.params / (1 << 20), m.grads / (1 << 20), m.optim / (1 << 20),
                m.activations / (1 << 20), m.comm / (1 << 20));
  return buf;
}

}  // namespace st::runtime
