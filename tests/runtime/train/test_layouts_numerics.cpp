// What every layout must draw and decide alike (layouts_common.h: the property, the tolerance):
// dropout masks keyed by the global sequence index, and an fp16 overflow on one rank that every
// rank skips together.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "tests/runtime/train/layouts_common.h"

using namespace st;
using namespace st::runtime;
using namespace st::layouts;


// Dropout on (p 0.1, GPT embedding and residual dropouts): masks follow the global sequence index
// (runtime/nn/dropout_context.h), so every layout still equals one process — and the one-process run
// itself differs from the run without dropout (the masks are really applied).
TEST(Layouts, DropoutMasksAreTheSameInEveryLayout) {
  const int n = world_size();
  TrainConfig c = base_config();
  c.heads = 12;
  c.d_model = 48;
  c.vocab = 62;
  c.dropout = 0.1;
  Curve one = reference(c, n);
  TrainConfig off = c;
  off.dropout = 0;
  EXPECT_NE(reference(off, n).loss[0], one.loss[0]) << "dropout 0.1 changed nothing";
  TrainConfig l = c;
  l.dp = n;
  expect_same(run_layout(l, "drop_dp"), one, "dropout, dp " + std::to_string(n));
  l.dp = 1;
  l.grad_accum = c.grad_accum * n;
  l.pp = n;
  l.schedule = Schedule::one_f_one_b;
  l.recompute = true;  // recomputed forwards must redraw the same masks
  expect_same(run_layout(l, "drop_pp"), one, "dropout, pp " + std::to_string(n) + " 1f1b + recompute");
  l.pp = 1;
  l.recompute = false;
  l.tp = n;
  expect_same(run_layout(l, "drop_tp"), one, "dropout, tp " + std::to_string(n));
  if (n == 4) {
    l.tp = 2;
    l.dp = 2;
    l.grad_accum = c.grad_accum * 2;
    l.zero = true;
    expect_same(run_layout(l, "drop_dp2tp2"), one, "dropout, dp 2 × tp 2, zero 1");
  }
  // the seed's encoder Transformer keeps its own dropout 0.1 (three uses of one site per layer)
  TrainConfig st = base_config();
  st.model = "simple-transformer";
  Curve st_one = reference(st, n);
  st.dp = n;
  expect_same(run_layout(st, "drop_st_dp"), st_one, "simple-transformer (dropout 0.1), dp " + std::to_string(n));
  st.dp = 1;
  st.grad_accum *= n;
  st.pp = n;
  expect_same(run_layout(st, "drop_st_pp"), st_one, "simple-transformer (dropout 0.1), pp " + std::to_string(n));
}

// fp16 overflow on one rank only (the last): every rank must skip that step and halve its scale.
// The curve after the skip equals a one-process run with the same overflow: a rank that stepped
// while the others skipped would leave its replica (or stage) elsewhere, and the next steps would
// show it.
TEST(Layouts, Fp16OverflowSkippedByEveryRank) {
  const int n = world_size();
  TrainConfig c = base_config();
  c.precision = Precision::fp16;
  TrainSeams ref_seam, last_seam;  // step 2 (from 1): the one-process reference's only rank, the layout's last
  ref_seam.after_gradients = infinite_gradient(2, false, 0);
  last_seam.after_gradients = infinite_gradient(2, false, n - 1);
  const Curve want = reference(c, n, ref_seam);
  const Curve want_pp = reference(c, 1, ref_seam);
  TrainConfig dp = c;
  dp.dp = n;
  const Curve got = run_layout(dp, "fp16_overflow_dp", last_seam);
  TrainConfig pp = c;
  pp.pp = n;
  pp.dp = 1;
  const Curve got_pp = run_layout(pp, "fp16_overflow_pp", last_seam);  // the last stage overflows
  for (const auto& [curve, ref, what] : {std::tuple{&got, &want, "dp"}, std::tuple{&got_pp, &want_pp, "pp"}}) {
    ASSERT_EQ(curve->loss.size(), 5u) << what;
    EXPECT_EQ(curve->skipped, (std::vector<bool>{false, true, false, false, false})) << what;
    EXPECT_EQ(ref->skipped, curve->skipped) << what << ": the reference skipped elsewhere";
    EXPECT_EQ(curve->loss_scale[1], 65536.0) << what;
    EXPECT_EQ(curve->loss_scale[2], 32768.0) << what << ": the scale halves after the skipped step";
    for (double l : curve->loss) EXPECT_TRUE(std::isfinite(l)) << what;
    // the steps after the skip, loss and grad norm, within the noise of the one-process run
    Curve after = *curve, ref_after = *ref;
    for (Curve* v : {&after, &ref_after}) {
      v->loss.erase(v->loss.begin(), v->loss.begin() + 2);
      v->grad_norm.erase(v->grad_norm.begin(), v->grad_norm.begin() + 2);
    }
    ref_after.loss_noise.erase(ref_after.loss_noise.begin(), ref_after.loss_noise.begin() + 2);
    ref_after.norm_noise.erase(ref_after.norm_noise.begin(), ref_after.norm_noise.begin() + 2);
    expect_same(after, ref_after, std::string("fp16 overflow on the last rank, ") + what + ", steps 3-5");
  }
}
