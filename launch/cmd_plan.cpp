// `shardtrain plan`: the memory planner (runtime/plan/memory_plan.h) from the command line. With
// the train flags (or --config) it prints what each rank of that layout will hold at its peak;
// with --gpu-memory it lists the layouts of --world ranks that fit, best first by the cost model
// of runtime/plan/layout_search.h. Nothing is built or allocated; no MPI.
#include <cmath>
#include <cstdio>
#include <iostream>

#include "launch/commands.h"
#include "launch/config.h"
#include "runtime/plan/layout_search.h"
#include "runtime/plan/memory_check.h"
#include "runtime/setup/model_registry.h"

namespace st::launch {
namespace {

struct PlanOptions {
  std::string gpu_memory;  // "24GiB", "80 GB", "" (none)
  int64_t world = 0;       // 0: dp · tp · pp of the flags (dp 0 counts as 1)
  int64_t top = 10;
  runtime::CostModel cost;
};

// "24GiB", "24 GiB", "80GB", "512MiB", "1.5T" → bytes (binary units; GB/TB are taken as GiB/TiB,
// as GPU vendors mean them); a bare number is GiB.
double parse_size(const std::string& text) {
  double v = 0;
  char unit[16] = {0};
  const int n = std::sscanf(text.c_str(), "%lf %15s", &v, unit);
  const std::string u = n == 2 ? unit : "GiB";
  double k = 0;
  if (u == "B") k = 1;
  else if (u == "KiB" || u == "K" || u == "KB") k = 1024.0;
  else if (u == "MiB" || u == "M" || u == "MB") k = 1024.0 * 1024;
  else if (u == "GiB" || u == "G" || u == "GB") k = 1024.0 * 1024 * 1024;
  else if (u == "TiB" || u == "T" || u == "TB") k = 1024.0 * 1024 * 1024 * 1024;
  if (n < 1 || k == 0 || !(v > 0) || !std::isfinite(v))
    throw UsageError("--gpu-memory: expected a size such as 24GiB, 80GB or 512MiB, got '" + text + "'");
  return v * k;
}

OptionTable plan_options(runtime::TrainConfig& cfg, PlanOptions& p) {
  OptionTable t = train_options(cfg);
  t.add({"gpu-memory", "plan", "SIZE", "each device's memory (24GiB, 80GB, ...): list the layouts of --world ranks that fit",
         false, OptionTable::bind(p.gpu_memory), [&p] { return p.gpu_memory; }});
  t.add({"world", "plan", "N", "ranks to plan for (1 ... 1024); 0: dp x tp x pp of the flags", false,
         OptionTable::bind(p.world), [&p] { return std::to_string(p.world); }});
  t.add({"top", "plan", "N", "layouts listed with --gpu-memory", false, OptionTable::bind(p.top),
         [&p] { return std::to_string(p.top); }});
  t.add({"flops", "plan", "F", "cost model: dense peak FLOP/s per device", false, OptionTable::bind(p.cost.flops),
         [&p] { return std::to_string(p.cost.flops); }});
  t.add({"intra-gbs", "plan", "F", "cost model: GB/s between the GPUs of a node", false,
         OptionTable::bind(p.cost.intra_gbs), [&p] { return std::to_string(p.cost.intra_gbs); }});
  t.add({"inter-gbs", "plan", "F", "cost model: GB/s between nodes", false, OptionTable::bind(p.cost.inter_gbs),
         [&p] { return std::to_string(p.cost.inter_gbs); }});
  t.add({"gpus-per-node", "plan", "N", "cost model: GPUs per node (tp stays inside one)", false,
         OptionTable::bind(p.cost.gpus_per_node), [&p] { return std::to_string(p.cost.gpus_per_node); }});
  return t;
}

const char* kEpilog =
    "Prints each rank's planned memory (parameters, gradients, optimizer state, activations at the\n"
    "schedule's in-flight peak, communication buffers: DP cast buffers of --bucket-mb, pipeline p2p)\n"
    "for the layout of the flags, on --device (default cpu: the activations the CPU ops keep; cuda:\n"
    "the CUDA paths', whose fused bias/GELU epilogues and, in f16/bf16 at tp 1 with head size 64,\n"
    "packed attention keep fewer tensors). The closed forms are in docs/memory.md; on the CPU they agree\n"
    "with the allocator's measured peaks within 5 % (tests/runtime/plan/test_memory_plan.cpp).\n"
    "\n"
    "With --gpu-memory SIZE: the layouts of --world ranks (dp x tp x pp, ZeRO 0-3 when dp > 1,\n"
    "recompute 0/1, 1F1B; the global batch micro-batch x grad-accum x dp of the flags kept) whose\n"
    "every rank's peak on --device fits, best first by this cost model (per optimizer step, seconds;\n"
    "a ranking, not a promise):\n"
    "  compute  3 F N / (world flops) x (1 + (pp-1)/m) x (4/3 with recompute)\n"
    "           F forward FLOPs per token, N tokens per step, m micro-batches (grad-accum)\n"
    "  tp       L/pp x m x 4 all-reduces of B T C e bytes, x 2(tp-1)/tp, over --intra-gbs\n"
    "  dp       over --inter-gbs (world > --gpus-per-node) or --intra-gbs; P_stage = P/(tp pp),\n"
    "           P the model's parameters (a tied weight once), e_c the --grad-comm-dtype bytes:\n"
    "           ZeRO 0    2(dp-1)/dp x P_stage x e_c, hidden behind the backward (2/3 of\n"
    "                     compute) but for one bucket\n"
    "           ZeRO 1/2  (dp-1)/dp x P_stage x e_c to the owners, hidden the same way, plus\n"
    "                     (dp-1)/dp x P_stage x e of updated values broadcast after the step\n"
    "           ZeRO 3    m x (dp-1)/dp x P_stage x (2e + e_c): two all-gathers and a reduce-\n"
    "                     scatter per micro-batch, hidden behind all of compute but for the\n"
    "                     first gather of each pass, 2m x (dp-1)/dp x U x e (U the largest layer)\n"
    "  pp       (m + pp - 1) x 2 B T C e over the same link";

std::string mib(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", b / (1 << 20));
  return buf;
}

}  // namespace

int cmd_plan(const std::vector<std::string>& args) {
  runtime::TrainConfig cfg;
  PlanOptions p;
  OptionTable t = plan_options(cfg, p);
  if (OptionTable::wants_help(args)) {
    std::cout << t.help("shardtrain plan [--config FILE.yaml] [train flags] [--gpu-memory SIZE --world N]", kEpilog);
    return 0;
  }
  if (const std::string file = OptionTable::config_path(args); !file.empty()) t.load_yaml(file);
  t.parse_flags(args);
  resolve_init_from(cfg, t);
  validate(cfg, t);
  const int64_t flags_world = std::max<int64_t>(cfg.dp, 1) * cfg.tp * cfg.pp;
  const int64_t world = p.world > 0 ? p.world : flags_world;
  if (world < 1 || world > 1024) throw UsageError("--world: 1 ... 1024, got " + std::to_string(world));
  const nlohmann::json entry = runtime::model_entry(cfg);
  const int64_t seq_len = cfg.seq_len > 0 ? cfg.seq_len : runtime::describe_model(entry, 1).context_length;
  const int64_t dp = cfg.dp > 0 ? cfg.dp : world / (cfg.tp * cfg.pp);
  const runtime::PlanLayout asked = runtime::plan_layout(cfg, std::max<int64_t>(dp, 1));
  if (p.gpu_memory.empty()) {
    if (dp * cfg.tp * cfg.pp != world)
      throw UsageError("--world " + std::to_string(world) + " is not dp x tp x pp = " + std::to_string(dp * cfg.tp * cfg.pp));
    std::cout << "model " << cfg.model << ", seq-len " << seq_len << ", " << runtime::to_string(cfg.precision)
              << ", micro-batch " << cfg.micro_batch << ", grad-accum " << cfg.grad_accum << ", on "
              << runtime::to_string(cfg.device) << "\n"
              << runtime::memory_plan_table(runtime::plan_memory(entry, seq_len, asked), asked);
    return 0;
  }
  const double device = parse_size(p.gpu_memory);
  const auto ranked = runtime::fitting_layouts(entry, seq_len, asked, world, device, p.cost);
  std::cout << ranked.size() << " layouts of " << world << " ranks fit in " << runtime::human_bytes(device)
            << " per " << runtime::to_string(cfg.device) << " device (global batch "
            << asked.micro_batch * asked.grad_accum * asked.dp << " x " << seq_len << " tokens), best first:\n";
  char row[200];
  std::snprintf(row, sizeof row, "%4s %4s %4s %4s %5s %4s %9s %10s %10s %9s %9s %9s %9s\n", "dp", "tp", "pp", "zero",
                "recmp", "m", "sched", "peak MiB", "step ms", "compute", "tp", "dp", "pp");
  std::cout << row;
  for (size_t i = 0; i < ranked.size() && static_cast<int64_t>(i) < p.top; ++i) {
    const auto& r = ranked[i];
    const auto& l = r.layout;
    std::snprintf(row, sizeof row, "%4lld %4lld %4lld %4d %5d %4lld %9s %10s %10.2f %9.2f %9.2f %9.2f %9.2f\n",
                  static_cast<long long>(l.dp), static_cast<long long>(l.tp), static_cast<long long>(l.pp), l.zero,
                  l.recompute ? 1 : 0, static_cast<long long>(l.grad_accum), l.pp > 1 ? "1f1b" : "-",
                  mib(r.peak).c_str(), 1e3 * r.cost.total(), 1e3 * r.cost.compute_s, 1e3 * r.cost.tp_s,
                  1e3 * r.cost.dp_s, 1e3 * r.cost.pp_s);
    std::cout << row;
  }
  return ranked.empty() ? 1 : 0;
}

}  // namespace st::launch
