// The layout search of `shardtrain plan --gpu-memory` (runtime/train/layout_search.h): its cost
// model against the closed form written out here for one layout (a GPT of 4 blocks, C = 64,
// T = 32), and the search's contract: only layouts whose every rank fits are listed, best
// first, and a device smaller than every layout's need lists none. The memory numbers
// themselves are held to the allocator by test_memory_plan.
#include <gtest/gtest.h>

#include "runtime/train/layout_search.h"
#include "runtime/train/model_registry.h"

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
    if (i > 0) EXPECT_LE(fit[i - 1].cost.total(), fit[i].cost.total());
  }
  EXPECT_TRUE(fitting_layouts(entry, 32, asked, 4, 1024, CostModel{}).empty());
}
