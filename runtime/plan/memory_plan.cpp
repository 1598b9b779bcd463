// The memory planner's closed forms (see the header for every term and where it comes from).
#include "runtime/plan/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "runtime/parallel/parameter_sharding.h"
#include "runtime/pipeline/stage_model.h"
#include "runtime/plan/activation_bytes.h"
#include "runtime/plan/memory_check.h"
#include "runtime/plan/stage_memory.h"
#include "runtime/setup/model_registry.h"
#include "tensor/memory_category.h"

namespace st::runtime {

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
  StageInputs in;
  // every dp term counts the ranks that sum the gradients (and ZeRO shards over): dp × cp
  in.l = layout;
  in.l.dp = layout.dp * layout.cp;
  const PlanLayout& l = in.l;
  MemoryPlan plan;
  const ModelFactory& f = model_factory(entry.value("family", std::string()));
  const ModelDescription d = describe_model(entry, seq_len);
  in.d = &d;
  in.rule = f.shard_rule && l.tp > 1 ? f.shard_rule(entry.at("config")) : ShardRule();
  in.part = choose_partition(l.partition, d, static_cast<int>(l.pp * l.virtual_stages));
  // activations from the model's decoder description (DecoderShape); none for another model
  in.decoder = d.decoder.has_value();
  if (!in.decoder) plan.notes = "activations are modelled for decoder models only (0 here)";
  in.tokens = local_tokens(l, seq_len);
  in.a = in.decoder ? decoder_activations(*d.decoder, static_cast<double>(d.vocab_size), l, in.tokens)
                    : ActivationCoefficients{};
  const ParamBytes pb = param_bytes(l.precision, l.optimizer, l.snapshot_block);  // as the memory check's
  in.e = pb.weight, in.master = pb.master, in.state = pb.state + pb.snapshot;
  in.C = in.decoder ? static_cast<double>(d.decoder->d_model) : 0.0;
  for (int s = 0; s < l.pp; ++s) plan.stages.push_back(plan_stage(in, s));
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
