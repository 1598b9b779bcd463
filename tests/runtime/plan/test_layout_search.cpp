// The layout search of `shardtrain plan --gpu-memory` (runtime/plan/layout_search.h): its cost
// model against the closed form written out here for one layout (a GPT of 4 blocks, C = 64,
// T = 32) and for the data-parallel term of each ZeRO stage, and the search's contract: only
// layouts whose every rank fits are listed, best first, ZeRO 0-3 searched (a device that only
// ZeRO-3 fits lists ZeRO-3), and a device smaller than every layout's need lists none. The memory
// numbers themselves are held to the allocator by test_memory_plan.
#include <gtest/gtest.h>

#include "runtime/plan/layout_search.h"
#include "runtime/setup/model_registry.h"

using namespace st;
using namespace st::runtime;

namespace {

TrainConfig gpt() {
  TrainConfig c;
  c.layers = 4, c.d_model = 64, c.heads = 4, c.vocab = 256, c.seq_len = 32, c.micro_batch = 8, c.grad_accum = 4;
  return c;
}

}  // namespace

TEST(LayoutSearch, CostIsTheStatedClosedForm) {
  const TrainConfig c = gpt();
  const auto entry = model_entry(c);
  PlanLayout l = plan_layout(c, 2);
  l.tp = 2, l.pp = 2;  // world 8, one node
  CostModel cm;
  const StepCost s = step_cost(entry, 32, l, cm);
  // forward FLOPs per token: 4 blocks of 2(3C² + C² + 4C² + 4C²) + 4TC, the head 2VC
  const double C = 64, T = 32, V = 256;
  const double F = 4 * (2 * 12 * C * C + 4 * T * C) + 2 * V * C;
  const double tokens = 8 * 32 * 4 * 2;  // micro-batch · T · m · dp
  EXPECT_NEAR(s.compute_s, 3 * F * tokens / (8 * cm.flops) * (1 + 1.0 / 4), 1e-3 * s.compute_s);
  // tp: L/pp · m · 4 all-reduces · 2(tp−1)/tp · B·T·C·4 bytes over the node's links
  EXPECT_NEAR(s.tp_s, 2.0 * 4 * 4 * 1.0 * 8 * 32 * 64 * 4 / (cm.intra_gbs * 1e9), 1e-9);
  // pp: (m + pp − 1) · 2 · B·T·C·4 bytes
  EXPECT_NEAR(s.pp_s, 5.0 * 2 * 8 * 32 * 64 * 4 / (cm.intra_gbs * 1e9), 1e-12);
  l.recompute = true;
  EXPECT_NEAR(step_cost(entry, 32, l, cm).compute_s, s.compute_s * 4 / 3, 1e-6 * s.compute_s);
}

TEST(LayoutSearch, ListsOnlyWhatFitsBestFirst) {
  const TrainConfig c = gpt();
  const auto entry = model_entry(c);
  const PlanLayout asked = plan_layout(c, 1);
  const double device = 8.0 * 1024 * 1024;  // 8 MiB: one process needs ~12.6 (test_memory_plan)
  const auto all = fitting_layouts(entry, 32, asked, 4, 1e18, CostModel{});
  const auto fit = fitting_layouts(entry, 32, asked, 4, device, CostModel{});
  ASSERT_FALSE(fit.empty());
  EXPECT_LT(fit.size(), all.size());  // the cap removes some
  for (size_t i = 0; i < fit.size(); ++i) {
    EXPECT_LE(fit[i].peak, device);
    EXPECT_EQ(fit[i].layout.world(), 4);
    EXPECT_EQ(fit[i].layout.micro_batch * fit[i].layout.grad_accum * fit[i].layout.dp, 32);  // the global batch kept
    if (i > 0) {
      EXPECT_LE(fit[i - 1].cost.total(), fit[i].cost.total());
    }
  }
  EXPECT_TRUE(fitting_layouts(entry, 32, asked, 4, 1024, CostModel{}).empty());
}

// The dp term per ZeRO stage at dp 4 (one node: --intra-gbs), fp32 (e = e_c = 4), m = 4 micro-batches.
// P = 4 blocks · (12C² + 13C) + wte V·C + wpe 32·C + ln_f 2C (wte once); U the largest layer, the
// embedding (wte + wpe). This model's gradients fit one bucket, so ZeRO 0-2 expose all of theirs.
TEST(LayoutSearch, DataParallelTermOfEachZeroStage) {
  const TrainConfig c = gpt();
  const auto entry = model_entry(c);
  const double C = 64, V = 256, P = 4 * (12 * C * C + 13 * C) + V * C + 32 * C + 2 * C, U = V * C + 32 * C;
  const double link = CostModel{}.intra_gbs * 1e9, share = 3.0 / 4, m = 4;
  PlanLayout l = plan_layout(c, 4);
  double want[4] = {2 * share * P * 4 / link,                               // all-reduce
                    share * P * 4 / link + share * P * 4 / link,             // reduce to the owners + broadcast
                    share * P * 4 / link + share * P * 4 / link, 0};          // ZeRO-2 moves the same
  for (int zero = 0; zero <= 3; ++zero) {
    l.zero = zero;
    const StepCost s = step_cost(entry, 32, l, CostModel{});
    // ZeRO-3: two all-gathers and a reduce-scatter of every parameter per micro-batch, hidden
    // behind the compute but for the first gather of each pass
    if (zero == 3) want[3] = std::max(2 * m * share * U * 4 / link, m * share * P * 12 / link - s.compute_s);
    EXPECT_NEAR(s.dp_s, want[zero], 1e-9 * want[zero]) << "zero " << zero;
  }
  EXPECT_GT(want[3], want[1]);  // the extra gathers cost
}

// A model that only sharding its weights makes fit: the MLP of one hidden layer (no tensor-parallel
// form, too few layers for a pipeline: at world 4, dp 4 only), V 8192 × C 256 embedding and head
// (the planner counts its weights, gradients and optimizer state). ZeRO-3 holds 1/4 of each
// layer plus the two it gathers (24.6 MiB), ZeRO-2 every weight (28.5): on a device between them
// only ZeRO-3 layouts are listed — and some are.
TEST(LayoutSearch, ADeviceOnlyZeroThreeFitsListsZeroThree) {
  TrainConfig c;
  c.model = "mlp";
  c.layers = 1, c.d_model = 256, c.vocab = 8192, c.seq_len = 16, c.micro_batch = 1, c.grad_accum = 4;
  const auto entry = model_entry(c);
  const PlanLayout asked = plan_layout(c, 1);
  const auto all = fitting_layouts(entry, 16, asked, 4, 1e18, CostModel{});
  double best_other = 1e18, best_zero3 = 1e18;
  bool zero2 = false;
  for (const RankedLayout& r : all) {
    EXPECT_EQ(r.layout.dp, 4);
    (r.layout.zero == 3 ? best_zero3 : best_other) = std::min(r.layout.zero == 3 ? best_zero3 : best_other, r.peak);
    zero2 = zero2 || r.layout.zero == 2;
  }
  EXPECT_TRUE(zero2) << "ZeRO-2 not searched";
  ASSERT_LT(best_zero3, best_other) << "this model does not make the case";
  const double device = (best_zero3 + best_other) / 2;
  const auto fit = fitting_layouts(entry, 16, asked, 4, device, CostModel{});
  ASSERT_FALSE(fit.empty()) << "nothing listed for " << device << " bytes: ZeRO-3 not searched";
  for (const RankedLayout& r : fit) {
    EXPECT_EQ(r.layout.zero, 3);
    EXPECT_LE(r.peak, device);
  }
}

// Sequence parallelism is searched at tp > 1 where the run would accept it (a decoder family, no
// dropout, T divisible by tp): each SP layout has its twin without SP at the same cost (the
// all-gathers and reduce-scatters move what the all-reduces did) and a smaller peak, so it ranks
// first; a device between the two peaks lists the SP layout alone. Dropout, or a T that tp does
// not divide, leaves SP out.
TEST(LayoutSearch, SequenceParallelSearchedWhereTheRunAcceptsIt) {
  const TrainConfig c = gpt();
  const auto entry = model_entry(c);
  const PlanLayout asked = plan_layout(c, 1);
  const auto all = fitting_layouts(entry, 32, asked, 4, 1e18, CostModel{});
  auto same_but_sp = [](const PlanLayout& a, const PlanLayout& b) {
    return a.dp == b.dp && a.cp == b.cp && a.tp == b.tp && a.pp == b.pp && a.zero == b.zero &&
           a.recompute == b.recompute && a.sequence_parallel != b.sequence_parallel;
  };
  int with_sp = 0;
  const RankedLayout* gap_sp = nullptr;
  const RankedLayout* gap_twin = nullptr;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!all[i].layout.sequence_parallel) continue;
    ++with_sp;
    EXPECT_GT(all[i].layout.tp, 1);
    size_t twin = all.size();
    for (size_t j = 0; j < all.size(); ++j)
      if (same_but_sp(all[i].layout, all[j].layout)) twin = j;
    ASSERT_LT(twin, all.size()) << "no twin without SP";
    EXPECT_DOUBLE_EQ(all[i].cost.total(), all[twin].cost.total());
    EXPECT_LT(all[i].peak, all[twin].peak);
    EXPECT_LT(i, twin);  // equal cost: the smaller peak first
    if (!gap_sp || all[twin].peak - all[i].peak > gap_twin->peak - gap_sp->peak) gap_sp = &all[i], gap_twin = &all[twin];
  }
  EXPECT_GT(with_sp, 0) << "SP not searched";
  ASSERT_NE(gap_sp, nullptr);
  const double device = (gap_sp->peak + gap_twin->peak) / 2;
  bool sp_listed = false;
  for (const RankedLayout& r : fitting_layouts(entry, 32, asked, 4, device, CostModel{})) {
    EXPECT_FALSE(same_but_sp(r.layout, gap_sp->layout) && !r.layout.sequence_parallel) << "the twin does not fit";
    sp_listed = sp_listed || (r.layout.sequence_parallel && r.layout.dp == gap_sp->layout.dp && r.layout.cp == gap_sp->layout.cp &&
                              r.layout.tp == gap_sp->layout.tp && r.layout.pp == gap_sp->layout.pp &&
                              r.layout.zero == gap_sp->layout.zero && r.layout.recompute == gap_sp->layout.recompute);
  }
  EXPECT_TRUE(sp_listed);

  TrainConfig dropped = gpt();
  dropped.dropout = 0.1;
  for (const RankedLayout& r : fitting_layouts(model_entry(dropped), 32, plan_layout(dropped, 1), 4, 1e18, CostModel{}))
    EXPECT_FALSE(r.layout.sequence_parallel) << "SP listed with dropout";
  TrainConfig odd = gpt();
  odd.seq_len = 34;  // tp 2 divides it, tp 4 does not
  int sp_tp2 = 0;
  for (const RankedLayout& r : fitting_layouts(model_entry(odd), 34, plan_layout(odd, 1), 4, 1e18, CostModel{})) {
    if (r.layout.sequence_parallel) {
      EXPECT_EQ(r.layout.tp, 2);
    }
    sp_tp2 += r.layout.sequence_parallel && r.layout.tp == 2;
  }
  EXPECT_GT(sp_tp2, 0);
}

// Context parallelism (PlanLayout::cp): a rank holds B·T/cp tokens of every per-token term — a
// plan at cp 2 is one at cp 1 with half the micro-batch, plus at most the ring's buffers (its
// forward and backward moments), and its parameters, gradients and optimizer state are cp 1's; the ring's cost is the stated closed form (exposed
// at a short T, hidden behind the attention at a long one) and the gradients are reduced over
// dp × cp.
TEST(LayoutSearch, ContextParallelHoldsOneCpthOfTheTokensAtTheStatedCost) {
  TrainConfig c = gpt();
  c.seq_len = 64;
  const auto entry = model_entry(c);
  PlanLayout l = plan_layout(c, 2);
  l.cp = 2;
  PlanLayout half = plan_layout(c, 2);
  half.micro_batch = l.micro_batch / 2;
  const MemoryPlan a = plan_memory(entry, 64, l), b = plan_memory(entry, 64, half);
  // the ring's bytes a token of the rank: [k | v] held and arriving (2 · 2 · C · 4, MHA) and the
  // f32 output accumulator (C · 4); 8 sequences × 32 tokens a rank
  const double ring_bytes = (2 * 2 * 64 * 4 + 64 * 4) * 8 * 32;
  EXPECT_GE(a.stages[0].activations, b.stages[0].activations);
  EXPECT_LE(a.stages[0].activations, b.stages[0].activations + ring_bytes);
  const MemoryPlan whole = plan_memory(entry, 64, plan_layout(c, 2));
  EXPECT_DOUBLE_EQ(a.stages[0].params + a.stages[0].grads + a.stages[0].optim,
                   whole.stages[0].params + whole.stages[0].grads + whole.stages[0].optim);
  EXPECT_LT(a.stages[0].activations, 0.51 * whole.stages[0].activations);
  // ZeRO-1 under cp shards over dp × cp: dp 2 × cp 2 holds dp 4's optimizer share, to the byte
  PlanLayout z = l, z4 = plan_layout(c, 4);
  z.zero = z4.zero = 1;
  EXPECT_DOUBLE_EQ(plan_memory(entry, 64, z).stages[0].optim, plan_memory(entry, 64, z4).stages[0].optim);
  EXPECT_LT(plan_memory(entry, 64, z).stages[0].optim, 0.26 * whole.stages[0].optim);

  CostModel cm;
  const StepCost s = step_cost(entry, 64, l, cm);
  // the ring per block and micro-batch: K's elements of a rank kv = B·(T/cp)·H·D (H·D = C here);
  // (cp − 1)·2·kv·2·4 bytes of K and V (fp32) and cp·2·kv·4 of their gradients, less the
  // attention's 3.5·2·B·T²·C/cp FLOPs; 4 blocks, m = 4
  const double C = 64, T = 64, B = 8, kv = B * T / 2 * C;
  const double ring = (2 * kv * 2 * 4 + 2 * 2 * kv * 4) / (cm.intra_gbs * 1e9);
  const double attention = 3.5 * 2 * B * T * T * C / 2 / cm.flops;
  ASSERT_GT(ring, attention) << "this T does not make the exposed case";
  EXPECT_NEAR(s.cp_s, 4 * 4 * (ring - attention), 1e-9 * s.cp_s);
  EXPECT_NEAR(s.total(), s.compute_s + s.tp_s + s.dp_s + s.pp_s + s.cp_s, 1e-15);
  // dp 2 × cp 2: the gradients' all-reduce over 4 replicas, as dp 4's on the same tokens a step
  // (grad-accum 2: the compute it hides behind is the same)
  PlanLayout dp4 = plan_layout(c, 4);
  dp4.grad_accum = 2;
  ASSERT_GT(s.dp_s, 0.0);
  EXPECT_DOUBLE_EQ(s.dp_s, step_cost(entry, 64, dp4, cm).dp_s);
  EXPECT_DOUBLE_EQ(s.compute_s, step_cost(entry, 64, dp4, cm).compute_s);
  // a long T hides the ring: the attention's FLOPs grow as T², the ring's bytes as T (here the
  // two meet near T = 10 k: 3.5·T/flops = 16/intra per token and channel)
  c.seq_len = 32768;
  EXPECT_EQ(step_cost(model_entry(c), 32768, l, cm).cp_s, 0.0);
}

// Where no layout without cp fits (a long sequence, one GPU a node so that tp — and sequence
// parallelism with it — is out: dp, pp, ZeRO and recompute do not split T), the search lists
// layouts with cp — only those the trainer runs (cp_composes: any pp, no sequence parallelism,
// not fp8; T a multiple of 2·cp), ZeRO 1 to 3 (sharded over dp × cp) and cp × pp among them, best first.
TEST(LayoutSearch, ContextParallelListedWhereNothingWithoutItFits) {
  TrainConfig c = gpt();
  c.seq_len = 2048, c.micro_batch = 2, c.grad_accum = 1;
  const auto entry = model_entry(c);
  const PlanLayout asked = plan_layout(c, 1);
  CostModel cm;
  cm.gpus_per_node = 1;
  const auto all = fitting_layouts(entry, 2048, asked, 4, 1e18, cm);
  double best_without = 1e18, best_with = 1e18;
  bool with_zero = false, with_zero3 = false, with_pp = false;
  for (const RankedLayout& r : all) {
    if (r.layout.cp > 1) {
      with_zero = with_zero || r.layout.zero > 0;
      with_zero3 = with_zero3 || r.layout.zero == 3;
      with_pp = with_pp || r.layout.pp > 1;
      EXPECT_EQ(2048 % (2 * r.layout.cp), 0);
      EXPECT_TRUE(cp_composes(r.layout));
    }
    EXPECT_EQ(r.layout.micro_batch * r.layout.grad_accum * r.layout.dp, 2);  // the global batch kept
    (r.layout.cp > 1 ? best_with : best_without) = std::min(r.layout.cp > 1 ? best_with : best_without, r.peak);
  }
  EXPECT_TRUE(with_zero) << "ZeRO with cp not searched";
  EXPECT_TRUE(with_zero3) << "ZeRO-3 with cp not searched";
  EXPECT_TRUE(with_pp) << "cp x pp not searched";
  ASSERT_LT(best_with, best_without) << "cp not searched, or it saves nothing here";
  const double device = (best_with + best_without) / 2;
  const auto fit = fitting_layouts(entry, 2048, asked, 4, device, cm);
  ASSERT_FALSE(fit.empty()) << "nothing listed for " << device << " bytes";
  for (const RankedLayout& r : fit) {
    EXPECT_GT(r.layout.cp, 1);
    EXPECT_LE(r.peak, device);
  }
  // what the trainer refuses is not listed: sequence parallelism or fp8 with cp
  PlanLayout l = asked;
  l.cp = 2, l.tp = 2, l.sequence_parallel = true;
  EXPECT_FALSE(cp_composes(l));
  l.sequence_parallel = false, l.precision = Precision::fp8;
  EXPECT_FALSE(cp_composes(l));
}
