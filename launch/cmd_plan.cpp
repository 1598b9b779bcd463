// `shardtrain plan`: the memory planner (runtime/plan/memory_plan.h) from the command line. With
// the train flags (or --config) it prints the model's parameter count, what each rank of that
// layout will hold at its peak by kind, and the train line that runs it; with --gpu-memory (the
// CUDA plan, bf16 unless told) it lists the layouts of --world ranks that fit, best first by the
// cost model of runtime/plan/layout_search.h, with the train lines of the best, or fails with one
// line naming what to change. Nothing is built or allocated; no MPI.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>

#include "launch/commands.h"
#include "launch/config.h"
#include "launch/launch_command.h"
#include "runtime/plan/layout_search.h"
#include "runtime/plan/memory_check.h"
#include "runtime/setup/global_batch.h"
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

// %g-like, as --help shows a float (9.89e+14, not 989000000000000.000000)
std::string short_number(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

OptionTable plan_options(runtime::TrainConfig& cfg, PlanOptions& p) {
  OptionTable t = train_options(cfg);
  t.add({"gpu-memory", "plan", "SIZE", "each device's memory (24GiB, 80GB, ...): list the layouts of --world ranks that fit",
         false, OptionTable::bind(p.gpu_memory), [&p] { return p.gpu_memory; }});
  t.add({"world", "plan", "N", "ranks to plan for (1 ... 1024); unset: dp x cp x tp x pp of the flags", false,
         OptionTable::bind(p.world), [&p] { return std::to_string(p.world); }});
  t.add({"top", "plan", "N", "layouts listed with --gpu-memory (>= 1; the best 3 also as train lines)", false, OptionTable::bind(p.top),
         [&p] { return std::to_string(p.top); }});
  t.add({"flops", "plan", "F", "cost model: dense peak FLOP/s per device", false, OptionTable::bind(p.cost.flops),
         [&p] { return short_number(p.cost.flops); }});
  t.add({"intra-gbs", "plan", "F", "cost model: GB/s between the GPUs of a node", false,
         OptionTable::bind(p.cost.intra_gbs), [&p] { return short_number(p.cost.intra_gbs); }});
  t.add({"inter-gbs", "plan", "F", "cost model: GB/s between nodes", false, OptionTable::bind(p.cost.inter_gbs),
         [&p] { return short_number(p.cost.inter_gbs); }});
  t.add({"gpus-per-node", "plan", "N", "cost model: GPUs per node (tp stays inside one)", false,
         OptionTable::bind(p.cost.gpus_per_node), [&p] { return short_number(p.cost.gpus_per_node); }});
  return t;
}

const char* kEpilog =
    "Prints the model's parameter count, each rank's planned memory (parameters, gradients, optimizer\n"
    "state, activations at the schedule's in-flight peak, communication buffers: DP cast buffers of\n"
    "--bucket-mb, pipeline p2p) for the layout of the flags, on --device (default cpu: the activations\n"
    "the CPU ops keep; cuda: the CUDA paths', whose fused bias/GELU epilogues and, in f16/bf16 at tp 1\n"
    "with head size 64, packed attention keep fewer tensors), and the train command that runs it. The\n"
    "closed forms are in docs/memory.md; on the CPU they agree with the allocator's measured peaks\n"
    "within 5 % (tests/runtime/plan/test_memory_plan.cpp).\n"
    "\n"
    "With --gpu-memory SIZE: the plan is CUDA's (--device cuda unless --device is on the command line)\n"
    "in bf16 unless --precision is set; the layouts of --world ranks (dp x cp x tp x pp, ZeRO 0-3 when\n"
    "dp > 1, recompute 0/1, sequence parallelism 0/1 at tp > 1 without dropout and T % tp = 0, context\n"
    "parallelism (cp > 1: decoder models, T % 2cp = 0, any pp, ZeRO 0-3 over dp x cp), 1F1B;\n"
    "the global batch micro-batch x grad-accum x dp of the flags kept)\n"
    "whose every rank's peak fits are listed with their largest rank's bytes by kind, best first, and\n"
    "the best 3 as `launch/mpirun.sh -n N -- shardtrain train ...` lines that run them. When none fits\n"
    "it fails with one line naming the smallest plan and the --world or --micro-batch that fits. The\n"
    "ranking is by this cost model (per optimizer step, seconds; a ranking, not a promise):\n"
    "  compute  3 F N / (world flops) x (1 + (pp-1)/m) x (4/3 with recompute)\n"
    "           F forward FLOPs per token, N tokens per step, m micro-batches (grad-accum)\n"
    "  tp       L/pp x m x 4 all-reduces of B T C e bytes, x 2(tp-1)/tp, over --intra-gbs (the same\n"
    "           with sequence parallelism: an all-gather and a reduce-scatter for each; ties go to\n"
    "           the smaller peak)\n"
    "  dp       over --inter-gbs (world > --gpus-per-node) or --intra-gbs; P_stage = P/(tp pp),\n"
    "           P the model's parameters (a tied weight once), e_c the --grad-comm-dtype bytes:\n"
    "           ZeRO 0    2(dp-1)/dp x P_stage x e_c, hidden behind the backward (2/3 of\n"
    "                     compute) but for one bucket\n"
    "           ZeRO 1/2  (dp-1)/dp x P_stage x e_c to the owners, hidden the same way, plus\n"
    "                     (dp-1)/dp x P_stage x e of updated values broadcast after the step\n"
    "           ZeRO 3    m x (dp-1)/dp x P_stage x (2e + e_c): two all-gathers and a reduce-\n"
    "                     scatter per micro-batch, hidden behind all of compute but for the\n"
    "                     first gather of each pass, 2m x (dp-1)/dp x U x e (U the largest layer)\n"
    "  pp       (m + pp - 1) x 2 B T C e over the same link\n"
    "  cp       L/pp x m x the ring's exposed time: (cp-1) hops of K and V (2 B T/cp A_kv e each)\n"
    "           forward and again backward, and cp hops of their f32 gradients, over --intra-gbs\n"
    "           (--inter-gbs when cp x tp > --gpus-per-node), less the attention they run beside,\n"
    "           3.5 x 2 B T^2 H D / (tp cp flops); every term above counts B T/cp tokens a rank, and\n"
    "           the gradients are reduced over dp x cp";

std::string mib(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", b / (1 << 20));
  return buf;
}

// Options of plan only, and those the listed layouts set: left out of the train line's copy of
// the command line.
bool plan_only(const std::string& name) {
  for (const char* n : {"gpu-memory", "world", "top", "flops", "intra-gbs", "inter-gbs", "gpus-per-node"})
    if (name == n) return true;
  return false;
}
bool layout_flag(const std::string& name) {
  for (const char* n : {"dp", "cp", "tp", "pp", "zero", "recompute", "grad-accum", "schedule", "virtual-stages",
                        "sequence-parallel"})
    if (name == n) return true;
  return false;
}

// The train arguments that run what was planned: --config as given, every train flag given on
// the command line (its value as parsed), then — for a listed layout — its dp, tp, pp, ZeRO stage,
// recompute and grad-accum, 1F1B for a pipeline, sequence parallelism where on, and the device and
// precision --gpu-memory chose.
std::vector<std::string> train_args(const OptionTable& t, const std::vector<std::string>& args,
                                    const runtime::PlanLayout* layout, const std::vector<std::string>& chosen) {
  std::vector<std::string> out;
  if (const std::string file = OptionTable::config_path(args); !file.empty()) out = {"--config", file};
  for (const OptionSpec& s : t.specs()) {
    if (plan_only(s.name) || (layout && layout_flag(s.name))) continue;
    const auto it = t.origin().find(s.name);
    if (it == t.origin().end() || it->second != "command line" || !s.get) continue;
    out.push_back("--" + s.name);
    out.push_back(s.get());
  }
  if (layout) {
    const runtime::PlanLayout& l = *layout;
    for (const auto& [flag, value] : std::vector<std::pair<const char*, int64_t>>{
             {"--dp", l.dp}, {"--tp", l.tp}, {"--pp", l.pp}, {"--zero", l.zero}, {"--recompute", l.recompute ? 1 : 0},
             {"--grad-accum", l.grad_accum}}) {
      out.push_back(flag);
      out.push_back(std::to_string(value));
    }
    if (l.pp > 1) out.insert(out.end(), {"--schedule", "1f1b", "--virtual-stages", "1"});
    if (l.sequence_parallel) out.insert(out.end(), {"--sequence-parallel", "1"});
    if (l.cp > 1) out.insert(out.end(), {"--cp", std::to_string(l.cp)});
  }
  out.insert(out.end(), chosen.begin(), chosen.end());
  // a config file's --checkpoint-dir / --metrics would put every planned layout's run into the
  // same folder (and a later run there is refused): each line gets a --run-dir of its own,
  // runs/<config>-<layout> (launch/run_dir.h), unless the command line names where the run goes
  auto on_line = [&t](const char* name) {
    const auto it = t.origin().find(name);
    return it != t.origin().end() && it->second == "command line";
  };
  const std::string file = OptionTable::config_path(args);
  if (!file.empty() && (t.was_set("checkpoint-dir") || t.was_set("metrics")) && !on_line("run-dir") &&
      !on_line("checkpoint-dir") && !on_line("metrics")) {
    std::string name = std::filesystem::path(file).stem().string();
    if (layout)
      name += "-dp" + std::to_string(layout->dp) + (layout->cp > 1 ? "-cp" + std::to_string(layout->cp) : std::string()) +
              "-tp" + std::to_string(layout->tp) + "-pp" + std::to_string(layout->pp) +
              (layout->zero > 0 ? "-zero" + std::to_string(layout->zero) : std::string()) +
              (layout->recompute ? "-recompute" : "") + (layout->sequence_parallel ? "-sp" : "");
    out.insert(out.end(), {"--run-dir", "runs/" + name});
  }
  return out;
}

// Elements of the model's parameters, a tied weight once (what `train` prints on its model line).
int64_t parameter_count(const runtime::ModelDescription& d) {
  std::set<std::string> seen;
  int64_t n = 0;
  for (const runtime::LayerInfo& layer : d.layers)
    for (const auto& [name, shape] : layer.params)
      if (seen.insert(name).second) n += shape_numel(shape);
  return n;
}

// The largest rank's bytes by kind in `plan` (a reference into it: a temporary plan is refused).
const runtime::StageMemory& largest_stage(const runtime::MemoryPlan& plan) {
  return *std::max_element(plan.stages.begin(), plan.stages.end(),
                           [](const runtime::StageMemory& a, const runtime::StageMemory& b) { return a.peak < b.peak; });
}
const runtime::StageMemory& largest_stage(const runtime::MemoryPlan&& plan) = delete;

std::string layout_words(const runtime::PlanLayout& l) {
  return "dp " + std::to_string(l.dp) + (l.cp > 1 ? " cp " + std::to_string(l.cp) : std::string()) + " tp " + std::to_string(l.tp) + " pp " + std::to_string(l.pp) + " zero " +
         std::to_string(l.zero) + " recompute " + (l.recompute ? "1" : "0") + (l.sequence_parallel ? " sp 1" : "") +
         " grad-accum " + std::to_string(l.grad_accum);
}

// What to change when no layout fits: the smallest plan of this world, and the first larger
// world and the first smaller micro-batch (the global batch kept) where one fits.
std::string nothing_fits(const nlohmann::json& entry, int64_t seq_len, const runtime::PlanLayout& asked, int64_t world,
                         double device, const runtime::CostModel& cost, const std::string& where) {
  std::ostringstream o;
  o << "no layout of " << world << (world == 1 ? " rank" : " ranks") << " fits in " << runtime::human_bytes(device)
    << " per " << where
    << " device (dp x cp x tp x pp, ZeRO 0-3 where dp > 1, recompute 0 and 1, sequence parallelism at tp > 1, "
       "context parallelism for decoders tried)";
  const auto all = runtime::fitting_layouts(entry, seq_len, asked, world, std::numeric_limits<double>::infinity(), cost);
  const int64_t global = asked.micro_batch * asked.grad_accum * asked.dp;
  if (all.empty()) {
    o << ": none of them keeps the global batch of " << global << " sequences (micro-batch " << asked.micro_batch
      << " x grad-accum x dp); give a --micro-batch and --grad-accum whose product times dp is " << global;
    return o.str();
  }
  const auto smallest = *std::min_element(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.peak < b.peak; });
  o << ": the smallest, " << layout_words(smallest.layout) << ", needs " << runtime::human_bytes(smallest.peak)
    << " on its largest rank";
  std::vector<std::string> fixes;
  for (int64_t w = world * 2; w <= 1024 && fixes.empty(); w *= 2) {
    const auto fit = runtime::fitting_layouts(entry, seq_len, asked, w, device, cost);
    if (!fit.empty()) fixes.push_back("--world " + std::to_string(w) + " (" + layout_words(fit.front().layout) + ")");
  }
  for (int64_t mb = asked.micro_batch / 2; mb >= 1; mb /= 2) {
    if (global % (mb * asked.dp)) continue;
    runtime::PlanLayout smaller = asked;
    smaller.micro_batch = mb;
    smaller.grad_accum = global / (mb * asked.dp);
    const auto fit = runtime::fitting_layouts(entry, seq_len, smaller, world, device, cost);
    if (fit.empty()) continue;
    fixes.push_back("--micro-batch " + std::to_string(mb) + " (" + layout_words(fit.front().layout) +
                    ": the global batch kept)");
    break;
  }
  if (fixes.empty())
    o << "; neither more ranks (up to --world 1024) nor a smaller --micro-batch makes it fit: a smaller model or a "
         "larger device";
  else
    o << "; it fits with " << fixes.front() << (fixes.size() > 1 ? ", or with " + fixes.back() : std::string());
  return o.str();
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
  if (t.was_set("world") && p.world < 1) throw UsageError("--world: must be >= 1, got " + std::to_string(p.world));
  if (p.top < 1) throw UsageError("--top: must be >= 1, got " + std::to_string(p.top));
  // --gpu-memory asks about GPUs: the CUDA plan unless --device is on the command line, in the
  // precision given (bf16 unless --precision is set)
  std::vector<std::string> chosen;  // the flags that choice adds to the train lines
  auto on_command_line = [&t](const char* name) {
    const auto it = t.origin().find(name);
    return it != t.origin().end() && it->second == "command line";
  };
  if (!p.gpu_memory.empty()) {
    if (!on_command_line("device")) {
      cfg.device = Device::cuda;
      chosen.insert(chosen.end(), {"--device", "cuda"});
    }
    if (!t.was_set("precision")) {
      cfg.precision = runtime::Precision::bf16;
      chosen.insert(chosen.end(), {"--precision", "bf16"});
    }
  }
  resolve_init_from(cfg, t);
  validate(cfg, t);
  const int64_t flags_world = std::max<int64_t>(cfg.dp, 1) * cfg.cp * cfg.tp * cfg.pp;
  const int64_t world = p.world > 0 ? p.world : flags_world;
  if (world < 1 || world > 1024) throw UsageError("--world: 1 ... 1024, got " + std::to_string(world));
  const nlohmann::json entry = runtime::model_entry(cfg);
  const int64_t seq_len = cfg.seq_len > 0 ? cfg.seq_len : runtime::describe_model(entry, 1).context_length;
  const runtime::ModelDescription description = runtime::describe_model(entry, seq_len);
  const int64_t dp = cfg.dp > 0 ? cfg.dp : world / (cfg.cp * cfg.tp * cfg.pp);
  // --global-batch: the flags' layout's micro-batch and grad-accum (runtime/setup/global_batch.h)
  cfg.micro_batch_given = on_command_line("micro-batch");
  cfg.grad_accum_given = on_command_line("grad-accum");
  runtime::resolve_global_batch(cfg, std::max<int64_t>(dp, 1), [&t](const std::string& flag, const std::string& why) {
    throw UsageError("--" + flag + t.origin_of(flag) + ": " + why);
  });
  const runtime::PlanLayout asked = runtime::plan_layout(cfg, std::max<int64_t>(dp, 1));
  const bool gpus = cfg.device == Device::cuda;
  const std::string device_name = runtime::to_string(cfg.device);
  std::cout << "model " << runtime::model_family(cfg) << ": " << parameter_count(description) << " parameters | seq-len " << seq_len
            << " | " << runtime::to_string(cfg.precision) << " | micro-batch " << cfg.micro_batch << ", grad-accum "
            << cfg.grad_accum << ", global batch " << asked.micro_batch * asked.grad_accum * asked.dp << " x "
            << seq_len << " tokens | on " << device_name;
  if (!chosen.empty()) {
    std::cout << " (--gpu-memory:";
    for (size_t i = 0; i < chosen.size(); i += 2) std::cout << (i ? "," : "") << " " << chosen[i] << " " << chosen[i + 1];
    std::cout << " unless given)";
  }
  std::cout << "\n";
  if (p.gpu_memory.empty()) {
    if (dp * cfg.cp * cfg.tp * cfg.pp != world)
      throw UsageError("--world " + std::to_string(world) + " is not dp x cp x tp x pp = " +
                       std::to_string(dp * cfg.cp * cfg.tp * cfg.pp));
    std::cout << runtime::memory_plan_table(runtime::plan_memory(entry, seq_len, asked), asked)
              << "run it: " << launch_line(world, gpus, "train", train_args(t, args, nullptr, chosen)) << "\n";
    return 0;
  }
  const double device = parse_size(p.gpu_memory);
  const auto ranked = runtime::fitting_layouts(entry, seq_len, asked, world, device, p.cost);
  if (ranked.empty()) {
    std::cout << std::flush;
    throw ValueError(nothing_fits(entry, seq_len, asked, world, device, p.cost, device_name));
  }
  std::cout << ranked.size() << " layouts of " << world << " ranks fit in " << runtime::human_bytes(device) << " per "
            << device_name << " device, best first (MiB on the largest rank, by kind; step ms by the cost model of "
            << "plan --help):\n";
  char row[320];
  std::snprintf(row, sizeof row, "%3s %4s %3s %4s %4s %4s %9s %3s %10s %8s %9s %9s %9s %9s %8s %9s %9s %8s %8s %8s %8s %8s\n",
                "#", "dp", "cp", "tp", "pp", "zero", "recompute", "sp", "grad-accum", "schedule", "params", "grads", "optim",
                "act", "comm", "peak", "step ms", "compute", "tp", "dp", "pp", "cp");
  std::cout << row;
  const size_t shown = std::min<size_t>(ranked.size(), static_cast<size_t>(p.top));
  for (size_t i = 0; i < shown; ++i) {
    const auto& r = ranked[i];
    const auto& l = r.layout;
    const runtime::MemoryPlan plan = runtime::plan_memory(entry, seq_len, l);
    const runtime::StageMemory& m = largest_stage(plan);
    std::snprintf(row, sizeof row,
                  "%3zu %4lld %3lld %4lld %4lld %4d %9d %3d %10lld %8s %9s %9s %9s %9s %8s %9s %9.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n",
                  i + 1, static_cast<long long>(l.dp), static_cast<long long>(l.cp), static_cast<long long>(l.tp), static_cast<long long>(l.pp), l.zero,
                  l.recompute ? 1 : 0, l.sequence_parallel ? 1 : 0, static_cast<long long>(l.grad_accum), l.pp > 1 ? "1f1b" : "-", mib(m.params).c_str(),
                  mib(m.grads).c_str(), mib(m.optim).c_str(), mib(m.activations).c_str(), mib(m.comm).c_str(),
                  mib(r.peak).c_str(), 1e3 * r.cost.total(), 1e3 * r.cost.compute_s, 1e3 * r.cost.tp_s, 1e3 * r.cost.dp_s,
                  1e3 * r.cost.pp_s, 1e3 * r.cost.cp_s);
    std::cout << row;
  }
  const size_t lines = std::min<size_t>(shown, 3);
  std::cout << "run " << (lines == 1 ? "it" : "the best " + std::to_string(lines)) << ":\n";
  for (size_t i = 0; i < lines; ++i) {
    const runtime::PlanLayout& l = ranked[i].layout;
    const bool nodes = gpus && world > p.cost.gpus_per_node;  // several hosts: mpirun needs them named
    std::cout << "  #" << i + 1 << "  "
              << launch_line(world, gpus, "train", train_args(t, args, &l, chosen),
                             nodes ? std::vector<std::string>{"--hostfile", "HOSTS"} : std::vector<std::string>{});
    if (nodes) std::cout << "   # HOSTS: one 'node slots=" << p.cost.gpus_per_node << "' line per node";
    std::cout << "\n";
  }
  return 0;
}

}  // namespace st::launch
