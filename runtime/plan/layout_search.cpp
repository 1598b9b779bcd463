// Enumerating and ranking layouts (see the header for the cost model).
#include "runtime/plan/layout_search.h"

#include <algorithm>
#include <set>
#include <string>

#include "runtime/parallel/parameter_sharding.h"
#include "runtime/setup/model_registry.h"

namespace st::runtime {

StepCost step_cost(const nlohmann::json& entry, int64_t seq_len, const PlanLayout& l, const CostModel& cm) {
  const ModelDescription d = describe_model(entry, seq_len);
  double flops_per_token = 0, params = 0, largest = 0;  // elements; a tied weight once in `params`
  std::set<std::string> seen;
  for (const LayerInfo& layer : d.layers) {
    flops_per_token += layer.flops_per_token;
    largest = std::max(largest, layer.param_bytes() / 4);
    for (const auto& [name, shape] : layer.params)
      if (seen.insert(name).second) params += static_cast<double>(shape_numel(shape));
  }
  // the residual width: the decoder description's, else the config's own d_model (our families)
  const double C = d.decoder ? static_cast<double>(d.decoder->d_model) : entry.at("config").value("d_model", 0.0);
  const double blocks = static_cast<double>(d.layers.size()) - 2;
  const PrecisionPolicy policy = l.policy();
  const double e = static_cast<double>(dtype_size(policy.compute));
  const double e_c = static_cast<double>(dtype_size(policy.grad_comm));
  const double m = static_cast<double>(l.grad_accum), pp = static_cast<double>(l.pp), tp = static_cast<double>(l.tp);
  const double dp = static_cast<double>(l.dp), cp = static_cast<double>(l.cp), world = static_cast<double>(l.world());
  const double mb_tokens = static_cast<double>(l.micro_batch * seq_len);  // a micro-batch's, all cp ranks'
  const double local = mb_tokens / cp;                                    // one rank's of it
  const double tokens = mb_tokens * m * dp;
  const double intra = cm.intra_gbs * 1e9, inter = cm.inter_gbs * 1e9;
  const double across = l.world() > cm.gpus_per_node ? inter : intra;  // dp and pp groups span nodes
  StepCost s;
  s.compute_s = 3 * flops_per_token * tokens / (world * cm.flops) * (1 + (pp - 1) / m) * (l.recompute ? 4.0 / 3 : 1);
  // sequence parallel: each all-reduce becomes an all-gather and a reduce-scatter of the same ring
  // volume (Megatron's accounting), so the term is the same
  if (l.tp > 1) s.tp_s = blocks / pp * m * 4 * 2 * (tp - 1) / tp * local * C * e / intra;
  if (l.cp > 1 && d.decoder) {
    // the ring, per block and micro-batch: forward cp − 1 hops of the rank's K and V, backward
    // cp − 1 hops of K and V again and cp of their f32 gradients' accumulators, each batch posted
    // before the blocks it runs beside (runtime/parallel/ring_attention.h): exposed only where
    // it outlasts the attention's own work, ~3.5 × the causal forward's 2·B·T²·H·D / cp FLOPs
    const DecoderShape& ds = *d.decoder;
    const double kv = local * static_cast<double>(ds.kv_heads * ds.head_dim) / tp;  // a rank's K (elements)
    const double ring = ((cp - 1) * 2 * kv * 2 * e + cp * 2 * kv * 4) / (l.cp * l.tp > cm.gpus_per_node ? inter : intra);
    const double attention = 3.5 * 2 * static_cast<double>(l.micro_batch) * static_cast<double>(seq_len) *
                             static_cast<double>(seq_len) * static_cast<double>(ds.heads * ds.head_dim) / (tp * cp) / cm.flops;
    s.cp_s = blocks / pp * m * std::max(0.0, ring - attention);
  }
  const double replicas = dp * cp;  // the gradients are reduced over dp × cp (the weights are replicated over both)
  if (replicas > 1) {
    const double share = (replicas - 1) / replicas, stage = params / (tp * pp);  // a tp rank's elements of its stage
    if (l.zero >= 3) {
      const double bytes = m * share * stage * (2 * e + e_c), exposed = 2 * m * share * largest / tp * e;
      s.dp_s = std::max(exposed / across, bytes / across - s.compute_s);
    } else {
      const double bytes = (l.zero >= 1 ? 1 : 2) * share * stage * e_c;  // ZeRO: a reduce to the owners
      const double bucket = std::min(bytes, l.bucket_mb * 1024 * 1024);
      s.dp_s = std::max(bucket / across, bytes / across - s.compute_s * 2 / 3);
      if (l.zero >= 1) s.dp_s += share * stage * e / across;  // the updated values' broadcast
    }
  }
  if (l.pp > 1) s.pp_s = (m + pp - 1) * 2 * local * C * e / across;
  return s;
}

bool cp_composes(const PlanLayout& l) {
  // TrainConfig::validate_context_parallel's refusals (the model's own — a family with a
  // context-parallel form, no dropout — are the search's); pp composes: the memory plan and the
  // step cost count a stage's activations, in-flight micro-batches and p2p on B·T/cp tokens
  return l.cp == 1 || (!(l.sequence_parallel && l.tp > 1) && l.precision != Precision::fp8);
}

std::vector<RankedLayout> fitting_layouts(const nlohmann::json& entry, int64_t seq_len, const PlanLayout& asked,
                                          int64_t world, double device_bytes, const CostModel& cm) {
  const nlohmann::json& c = entry.at("config");
  const int64_t heads = c.value("n_head", c.value("heads", int64_t{1}));
  const bool tp_ok = model_factory(entry.value("family", std::string())).tensor_parallel;
  const ModelDescription d = describe_model(entry, seq_len);
  const int64_t blocks = static_cast<int64_t>(d.layers.size()) - 2;
  // sequence parallelism: the decoder families without dropout (train_config's rule), T divisible by tp
  const bool sp_model = d.decoder && d.decoder->embd_pdrop == 0 && d.decoder->resid_pdrop == 0;
  // context parallelism: a family with a context-parallel form (its attention a ring), no dropout
  const bool cp_model = sp_model && model_factory(entry.value("family", std::string())).context_parallel;
  const int64_t global = asked.micro_batch * asked.grad_accum * asked.dp;
  std::vector<RankedLayout> out;
  for (int64_t tp = 1; tp <= world; ++tp) {
    if (world % tp || heads % tp || tp > cm.gpus_per_node || (tp > 1 && !tp_ok)) continue;
    for (int64_t pp = 1; pp <= world / tp; ++pp) {
      if ((world / tp) % pp || pp > std::max<int64_t>(blocks, 1)) continue;
      for (int64_t cp = 1; cp <= world / (tp * pp); ++cp) {
        // context parallelism: a decoder (the ring replaces its attention), T in 2·cp chunks
        if ((world / (tp * pp)) % cp || (cp > 1 && (!cp_model || seq_len % (2 * cp)))) continue;
        const int64_t dp = world / (tp * pp * cp);
        if (global % (asked.micro_batch * dp)) continue;
        const int64_t m = global / (asked.micro_batch * dp);
        if (pp > 1 && m > max_pipeline_micro_batches(1)) continue;
        const int sp_max = tp > 1 && sp_model && seq_len % tp == 0 ? 1 : 0;
        for (int zero = 0; zero <= zero_stage_in_effect(3, dp * cp); ++zero)  // the stages that differ at this dp × cp
          for (int recompute = 0; recompute <= 1; ++recompute)
            for (int sp = 0; sp <= sp_max; ++sp) {
              PlanLayout l = asked;
              l.dp = dp, l.cp = cp, l.tp = tp, l.pp = pp, l.zero = zero, l.recompute = recompute != 0,
              l.sequence_parallel = sp != 0;
              if (!cp_composes(l)) continue;
              l.grad_accum = m;
              l.schedule = Schedule::one_f_one_b;
              l.virtual_stages = 1;
              const MemoryPlan plan = plan_memory(entry, seq_len, l);
              if (plan.max_peak() > device_bytes) continue;
              out.push_back({l, plan.max_peak(), step_cost(entry, seq_len, l, cm)});
            }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const RankedLayout& a, const RankedLayout& b) {
    if (a.cost.total() != b.cost.total()) return a.cost.total() < b.cost.total();
    return a.peak < b.peak;
  });
  return out;
}

}  // namespace st::runtime
