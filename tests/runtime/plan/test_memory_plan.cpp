// The memory planner (runtime/plan/memory_plan.h) against the allocator: for every layout of
// the table below, each rank's measured peaks of one training step — parameters, gradients,
// optimizer state, activations and the total (tensor/memory_category.h's counters, the same
// numbers as the metrics' mem_* fields and the end-of-run table; rank 0's JSONL line is checked
// to carry them) — against the plan's numbers for that rank's stage. Run at np 1, 2 and 4; each
// world size runs the layouts of its size (np 1: fp32, bf16, fp8, recompute, grad accumulation;
// np 2: dp, ZeRO-1, ZeRO-3, tp, tp with sequence parallelism, pp GPipe and 1F1B (and in fp8); np 4:
// pp 4 1F1B, dp 2 × pp 2, tp 2 × pp 2 with sequence parallelism and ZeRO-3 in bf16 with f32
// gradient communication; Llama: np 1 fp32, bf16, recompute; np 2 tp 2 (and sequence parallel),
// pp 2 1F1B, ZeRO-3). ZeRO-2 is held by the random sweep at the end of this file, not this table.
//
// Tolerance 5 % (the planner's stated accuracy) plus 64 bytes for tiny categories. The model: a
// GPT of 4 blocks, C = 64, 4 heads, V = 256, T = 32, micro-batch 8 (256 tokens), AdamW; a Llama
// of the same sizes (2 key/value heads, SwiGLU 96, untied head) for the grouped-query block. The
// allocator counts a pipeline's p2p buffers as activations (they are allocated inside the
// step's activation scope) and the DP reducer's cast buffers as gradients, so the measured
// activations are compared with the plan's activations + comm_p2p and the gradients with its
// gradients + comm_dp (bf16 gradients reduced in f32: the cast buffers).
#include <gtest/gtest.h>
#include <mpi.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/data/token_data.h"
#include "runtime/plan/memory_plan.h"
#include "runtime/setup/model_registry.h"
#include "runtime/train/parallel_training.h"
#include "tensor/memory_category.h"
#include "tensor/philox.h"
#include "tests/support/mpi_world.h"

using namespace st;
using namespace st::runtime;
namespace fs = std::filesystem;

namespace {

using st::testing::barrier;
using st::testing::world_rank;
using st::testing::world_size;

std::string work_dir() {
  static std::string dir = [] {
    std::string d = std::string(ST_TEST_BINARY_DIR) + "/memory_plan_np" + std::to_string(world_size());
    if (world_rank() == 0) {
      fs::remove_all(d);
      fs::create_directories(d);
      std::vector<uint16_t> tokens(20000);
      for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(philox4x32_10(7, i).x[0] % 256);
      write_token_file(d + "/tokens.bin", tokens);
    }
    barrier();
    return d;
  }();
  return dir;
}

TrainConfig base() {
  TrainConfig c;
  c.model = "gpt";
  c.layers = 4;
  c.d_model = 64;
  c.heads = 4;
  c.vocab = 256;
  c.seq_len = 32;
  c.micro_batch = 8;
  c.grad_accum = 1;
  c.steps = 2;
  c.partition = PartitionKind::uniform;
  c.data = work_dir() + "/tokens.bin";
  c.progress = false;
  c.log_every = 1000;
  c.timeout_s = 120;
  return c;
}

struct Case {
  int np;
  std::string name;
  TrainConfig cfg;
};

std::vector<Case> cases() {
  std::vector<Case> v;
  auto add = [&](int np, const std::string& name, auto edit) {
    TrainConfig c = base();
    edit(c);
    v.push_back({np, name, c});
  };
  add(1, "np 1 fp32", [](TrainConfig&) {});
  add(1, "np 1 bf16", [](TrainConfig& c) { c.precision = Precision::bf16; });
  add(1, "np 1 fp8", [](TrainConfig& c) { c.precision = Precision::fp8; });
  add(2, "pp 2 1f1b m 4 fp8", [](TrainConfig& c) { c.pp = 2, c.grad_accum = 4, c.precision = Precision::fp8; });
  add(1, "np 1 recompute", [](TrainConfig& c) { c.recompute = true; });
  add(1, "np 1 grad-accum 4", [](TrainConfig& c) { c.grad_accum = 4; });
  add(2, "dp 2", [](TrainConfig& c) { c.dp = 2; });
  add(2, "dp 2 zero 1", [](TrainConfig& c) { c.dp = 2, c.zero = true; });
  add(2, "dp 2 zero 3", [](TrainConfig& c) { c.dp = 2, c.zero = 3; });
  add(4, "dp 4 zero 3 bf16", [](TrainConfig& c) { c.dp = 4, c.zero = 3, c.precision = Precision::bf16; });
  add(2, "tp 2", [](TrainConfig& c) { c.tp = 2; });
  add(2, "tp 2 sp", [](TrainConfig& c) { c.tp = 2, c.sequence_parallel = 1; });
  add(4, "tp 2 pp 2 sp m 4", [](TrainConfig& c) { c.tp = 2, c.pp = 2, c.grad_accum = 4, c.sequence_parallel = 1; });
  add(2, "pp 2 gpipe m 4", [](TrainConfig& c) { c.pp = 2, c.schedule = Schedule::gpipe, c.grad_accum = 4; });
  add(2, "pp 2 1f1b m 4", [](TrainConfig& c) { c.pp = 2, c.schedule = Schedule::one_f_one_b, c.grad_accum = 4; });
  add(4, "pp 4 1f1b m 4", [](TrainConfig& c) { c.pp = 4, c.grad_accum = 4; });
  add(4, "dp 2 pp 2 1f1b m 4 bf16", [](TrainConfig& c) { c.dp = 2, c.pp = 2, c.grad_accum = 4, c.precision = Precision::bf16; });
  // Llama (the grouped-query block: RMSNorm, rope theta 500000, 4 heads over 2 key/value heads,
  // SwiGLU 96, an untied head) at the same sizes
  auto llama = [](TrainConfig& c) {
    c.model = "llama", c.kv_heads = 2, c.ffn = 96, c.rope_theta = 500000, c.tie_embeddings = 0;
  };
  add(1, "llama np 1 fp32", llama);
  add(1, "llama np 1 bf16", [&](TrainConfig& c) { llama(c), c.precision = Precision::bf16; });
  add(1, "llama np 1 recompute", [&](TrainConfig& c) { llama(c), c.recompute = true; });
  add(2, "llama tp 2", [&](TrainConfig& c) { llama(c), c.tp = 2; });
  add(2, "llama tp 2 sp", [&](TrainConfig& c) { llama(c), c.tp = 2, c.sequence_parallel = 1; });
  add(2, "llama pp 2 1f1b m 4", [&](TrainConfig& c) { llama(c), c.pp = 2, c.grad_accum = 4; });
  add(2, "llama dp 2 zero 3", [&](TrainConfig& c) { llama(c), c.dp = 2, c.zero = 3; });
  return v;
}

constexpr int kFields = 5;  // params, grads, optim, activations, total

void expect_near(double got, double want, const std::string& what, double slack = 64) {
  EXPECT_NEAR(got, want, 0.05 * want + slack) << what << ": measured " << got << ", planned " << want;
}
// ZeRO-1 owns contiguous runs of whole tensors balanced by bytes (runtime/parallel/zero1.h); the
// plan's even 1/dp share is off by at most the largest tensor's state (AdamW: 8 bytes × 4C²).
constexpr double kZeroSlack = 8.0 * 4 * 64 * 64;

}  // namespace

TEST(MemoryPlan, AgreesWithTheAllocatorWithin5Percent) {
  int ran = 0;
  for (const Case& k : cases()) {
    if (k.np != world_size()) continue;
    ++ran;
    TrainConfig c = k.cfg;
    c.metrics = work_dir() + "/m.jsonl";
    if (world_rank() == 0) std::filesystem::remove(c.metrics);  // each case a new run (a run refuses another's metrics)
    barrier();
    ASSERT_EQ(run_parallel_training(c), 0) << k.name;
    const MemoryUsage u = memory_usage(Device::cpu);  // the last step's peaks
    const std::vector<int64_t> mine{static_cast<int64_t>(u.peak_of(MemoryCategory::params)),
                                    static_cast<int64_t>(u.peak_of(MemoryCategory::grads)),
                                    static_cast<int64_t>(u.peak_of(MemoryCategory::optim)),
                                    static_cast<int64_t>(u.peak_of(MemoryCategory::activations)),
                                    static_cast<int64_t>(u.total_peak)};
    std::vector<int64_t> all(kFields * static_cast<size_t>(world_size()));
    MPI_Allgather(mine.data(), kFields, MPI_INT64_T, all.data(), kFields, MPI_INT64_T, MPI_COMM_WORLD);
    if (world_rank() == 0) {  // rank 0's metrics line carries its own numbers
      std::ifstream in(c.metrics);
      std::string line, last;
      while (std::getline(in, line)) last = line;
      const auto j = nlohmann::json::parse(last);
      EXPECT_EQ(j["mem_params"].get<int64_t>(), all[0]) << k.name;
      EXPECT_EQ(j["mem_act_peak"].get<int64_t>(), all[3]) << k.name;
      EXPECT_EQ(j["mem_peak"].get<int64_t>(), all[4]) << k.name;
    }
    const int64_t dp = c.dp > 0 ? c.dp : world_size() / (c.tp * c.pp);
    const PlanLayout l = plan_layout(c, dp);
    const MemoryPlan plan = plan_memory(model_entry(c), c.seq_len, l);
    for (int r = 0; r < world_size(); ++r) {
      const StageMemory& m = plan.stages[static_cast<size_t>(stage_of_rank(l, r))];
      const int64_t* g = &all[static_cast<size_t>(kFields * r)];
      const std::string w = k.name + ", rank " + std::to_string(r);
      expect_near(static_cast<double>(g[0]), m.params, w + " params");
      expect_near(static_cast<double>(g[1]), m.grads + m.comm_dp, w + " grads");
      const double zero_slack = c.zero ? kZeroSlack : 64;
      expect_near(static_cast<double>(g[2]), m.optim, w + " optimizer", zero_slack);
      expect_near(static_cast<double>(g[3]), m.activations + m.comm_p2p, w + " activations");
      expect_near(static_cast<double>(g[4]), m.peak, w + " peak", zero_slack);
      if (world_rank() == 0)
        std::printf("| %-24s | %d | %8.3f %8.3f | %8.3f %8.3f | %8.3f %8.3f |\n", k.name.c_str(), r,
                    m.activations / (1 << 20), g[3] / double(1 << 20), m.peak / (1 << 20), g[4] / double(1 << 20),
                    100.0 * (m.activations + m.comm_p2p - g[3]) / g[3], 100.0 * (m.peak - g[4]) / g[4]);
    }
    barrier();
  }
  EXPECT_GT(ran, 0) << "no layout of the table runs at np " << world_size();
}

// Sequence parallelism keeps 1/tp of the norm / residual / column-input region (issue 34): the
// table's GPT at tp = np (2 and 4) and its Llama at tp 2 (its 2 key/value heads split at most 2
// ways), each trained with and without --sequence-parallel 1. Per block and token the closed form
// (block_activations) says tp keeps r = 10 (GPT-2) / 8 (grouped-query) (B, T, C) tensors and sp
// r = 8/tp / 6/tp: the region on T/tp positions — its column-parallel GEMMs keeping their input's
// T-shard, gathered again in their backward — and no row-parallel partial sums (and GPT-2's
// c_attn and c_fc no pre-bias products: the column node adds the bias). Each rank's
// measured activation peak must fall by the planner's drop (plan(tp) − plan(tp sp), which is
// those blocks' drop, the norms' statistics / tp, the head's and the embedding's) within 5 % of it
// plus 64 KiB — the embedding's and the head's tensors the plan counts loosely (the planner's own
// 5 % on the two peaks would be ±100 % of the drop; this holds the difference itself). GEMMs that
// kept their gathered (B, T, C) inputs would give back 2 tensors a block fewer: 0.5 MiB of the
// GPT's 2.4 MiB drop at tp 2 (−21 %), of the Llama's 1.25 MiB (−40 %) — far outside it.
TEST(MemoryPlan, SequenceParallelKeepsOneTpthOfTheRegion) {
  const int np = world_size();
  if (np != 2 && np != 4) GTEST_SKIP() << "tp = np: runs at np 2 and 4";
  std::vector<std::pair<std::string, TrainConfig>> runs;
  TrainConfig g = base();
  g.tp = np;
  runs.push_back({"gpt tp " + std::to_string(np), g});
  if (np == 2) {
    TrainConfig l = base();
    l.model = "llama", l.kv_heads = 2, l.ffn = 96, l.rope_theta = 500000, l.tie_embeddings = 0, l.tp = 2;
    runs.push_back({"llama tp 2", l});
  }
  for (const auto& [name, tp_cfg] : runs) {
    double act[2] = {0, 0}, planned[2] = {0, 0};
    for (int sp = 0; sp < 2; ++sp) {
      TrainConfig c = tp_cfg;
      c.sequence_parallel = sp;
      c.metrics.clear();
      barrier();
      ASSERT_EQ(run_parallel_training(c), 0) << name << " sp " << sp;
      const int64_t mine = static_cast<int64_t>(memory_usage(Device::cpu).peak_of(MemoryCategory::activations));
      int64_t most = 0;  // every rank of a tp group holds the same; the largest
      MPI_Allreduce(&mine, &most, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
      act[sp] = static_cast<double>(most);
      planned[sp] = plan_memory(model_entry(c), c.seq_len, plan_layout(c, 1)).stages[0].activations;
    }
    const double drop = act[0] - act[1], want = planned[0] - planned[1];
    // the blocks' share of it: 4 blocks × 256 tokens × the closed form's per-token drop
    const DecoderShape shape = *describe_model(model_entry(tp_cfg), tp_cfg.seq_len).decoder;
    const double blocks = static_cast<double>(tp_cfg.layers * tp_cfg.micro_batch * tp_cfg.seq_len) *
                          (block_activations(shape, np, Precision::fp32, Device::cpu).bytes_per_token -
                           block_activations(shape, np, Precision::fp32, Device::cpu, 0, true).bytes_per_token);
    // per token and block: the region's 8 (grouped-query 6) (B, T, C) tensors to 1/tp, the two
    // partial sums gone, the norms' statistics to 1/tp; GPT-2 (biases, CPU) also c_attn's and
    // c_fc's pre-bias products (3A + F = 7C/tp), the bias added inside the column node
    const double C = static_cast<double>(tp_cfg.d_model), region = shape.swiglu ? 6 : 8, whole = region + 2;
    const double pre_bias = shape.swiglu ? 0 : 7 * C / np * 4;
    const double stats = (shape.rmsnorm ? 2 : 4) * (1 - 1.0 / np) * 4;
    EXPECT_DOUBLE_EQ(blocks, static_cast<double>(tp_cfg.layers * tp_cfg.micro_batch * tp_cfg.seq_len) *
                                 ((whole - region / np) * C * 4 + stats + pre_bias))
        << name << ": the closed form's region";
    EXPECT_NEAR(drop, want, 0.05 * want + 64 * 1024)
        << name << ": activation peak " << act[0] << " B without sp, " << act[1] << " B with; planned " << planned[0]
        << " and " << planned[1];
    if (world_rank() == 0)
      std::printf("| %-12s | tp act %8.3f MiB | sp act %8.3f MiB | drop %6.3f MiB (%5.1f %%) | "
                  "planned drop %6.3f MiB, blocks' %6.3f |\n",
                  name.c_str(), act[0] / (1 << 20), act[1] / (1 << 20), drop / (1 << 20), 100 * drop / act[0],
                  want / (1 << 20), blocks / (1 << 20));
  }
}

// The sweep (issue: a planner off by 16 % on a ZeRO-3 layout outside the table above): layouts
// and sizes drawn from a fixed Philox stream — family, width, blocks, sequence length,
// micro-batch, accumulation, dp × tp × pp of the world, ZeRO 0–3, schedule (interleaved where the
// blocks allow), recompute, precision, the chunked head — widths up to 256 with few tokens per
// micro-batch, where the weights and ZeRO-3's gathered units outweigh the activations (the
// table's model is the other way round). Each case trains 2 steps; every rank's total peak is
// held to its stage's planned peak within the planner's 5 % (plus the ZeRO-1 slack of the largest
// tensor's AdamW state: 8 bytes × 4C², whole tensors per owner). Same seed, same cases: a failure
// prints its case to rerun.
namespace {
struct SweepCase {
  std::string name;
  TrainConfig cfg;
};
std::vector<SweepCase> sweep_cases(int np, int count) {
  std::vector<SweepCase> v;
  for (uint64_t i = 0; static_cast<int>(v.size()) < count; ++i) {
    const auto r = philox4x32_10(20261205 + static_cast<uint64_t>(np), i);
    auto pick = [&](uint32_t word, int shift, std::initializer_list<int64_t> xs) {
      return *(xs.begin() + (word >> shift) % xs.size());
    };
    TrainConfig c = base();
    const bool llama = r.x[0] & 1;
    if (llama) c.model = "llama", c.kv_heads = 2, c.ffn = 96, c.tie_embeddings = 0;
    c.d_model = pick(r.x[0], 1, {32, 64, 128, 256});
    c.layers = pick(r.x[0], 4, {2, 3, 4});
    c.seq_len = pick(r.x[0], 8, {8, 16, 32});
    c.micro_batch = pick(r.x[0], 12, {1, 2, 4});
    c.grad_accum = pick(r.x[0], 16, {1, 2, 4});
    c.precision = (r.x[0] >> 20) & 1 ? Precision::bf16 : Precision::fp32;
    c.recompute = (r.x[0] >> 21) & 1;
    c.chunked_head = (r.x[0] >> 22) & 1;
    // dp × tp × pp = np (tp ≤ the key/value heads of the Llama, pp ≤ the blocks)
    std::vector<std::array<int64_t, 3>> grids;
    for (int64_t tp = 1; tp <= np; tp *= 2)
      for (int64_t pp = 1; pp * tp <= np; pp *= 2)
        if (np % (tp * pp) == 0 && (!llama || tp <= 2) && pp <= c.layers) grids.push_back({np / (tp * pp), tp, pp});
    const auto g = grids[r.x[1] % grids.size()];
    c.dp = g[0], c.tp = g[1], c.pp = g[2];
    c.zero = c.dp > 1 ? static_cast<int>(pick(r.x[1], 8, {0, 1, 2, 3})) : 0;
    if (c.pp > 1) {
      c.schedule = (r.x[1] >> 12) & 1 ? Schedule::gpipe : Schedule::one_f_one_b;
      if ((r.x[1] >> 13) & 1 && c.layers >= 2 * c.pp) c.schedule = Schedule::interleaved, c.virtual_stages = 2;
    }
    char name[200];
    std::snprintf(name, sizeof name, "#%llu %s C %lld L %lld T %lld B %lld K %lld dp %lld tp %lld pp %lld zero %d %s%s%s%s",
                  static_cast<unsigned long long>(i), c.model.c_str(), static_cast<long long>(c.d_model),
                  static_cast<long long>(c.layers), static_cast<long long>(c.seq_len),
                  static_cast<long long>(c.micro_batch), static_cast<long long>(c.grad_accum),
                  static_cast<long long>(c.dp), static_cast<long long>(c.tp), static_cast<long long>(c.pp), static_cast<int>(c.zero),
                  c.precision == Precision::bf16 ? "bf16" : "fp32", c.recompute ? " recompute" : "",
                  c.chunked_head ? " chunked-head" : "",
                  c.pp == 1 ? "" : c.schedule == Schedule::gpipe ? " gpipe" : c.schedule == Schedule::interleaved ? " interleaved" : " 1f1b");
    bool ok = true;
    c.validate([&](const std::string&, const std::string&) { ok = false; });
    if (ok) v.push_back({name, c});
  }
  return v;
}
}  // namespace

TEST(MemoryPlan, ARandomSweepOfLayoutsAgreesWithin5Percent) {
  for (const SweepCase& k : sweep_cases(world_size(), world_size() == 1 ? 4 : 8)) {
    TrainConfig c = k.cfg;
    c.metrics.clear();
    barrier();
    ASSERT_EQ(run_parallel_training(c), 0) << k.name;
    const int64_t mine = static_cast<int64_t>(memory_usage(Device::cpu).total_peak);
    std::vector<int64_t> all(static_cast<size_t>(world_size()));
    MPI_Allgather(&mine, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, MPI_COMM_WORLD);
    const PlanLayout l = plan_layout(c, c.dp);
    const MemoryPlan plan = plan_memory(model_entry(c), c.seq_len, l);
    const double slack = c.zero ? 8.0 * 4 * static_cast<double>(c.d_model * c.d_model) : 64;
    for (int r = 0; r < world_size() && world_rank() == 0; ++r) {  // rank 0 holds every rank's peak
      const double want = plan.stages[static_cast<size_t>(stage_of_rank(l, r))].peak, got = static_cast<double>(all[static_cast<size_t>(r)]);
      expect_near(got, want, k.name + ", rank " + std::to_string(r) + " peak", slack);
      std::printf("| %-88s | %d | %9.3f %9.3f MiB | %+6.2f %% |\n", k.name.c_str(), r, want / (1 << 20), got / (1 << 20),
                  100.0 * (want - got) / got);
    }
  }
}
