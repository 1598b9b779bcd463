// Layout-free dropout (runtime/nn/dropout_context.h): inside a DropoutScope a models::Dropout's mask
// is a function of (seed, site, call, step, global sequence index), so splitting a batch into
// micro-batches, or running a site's calls in a recomputed forward, gives the same masks.
#include <gtest/gtest.h>

#include "models/nn.h"
#include "runtime/nn/dropout_context.h"
#include "tensor/autograd.h"

using namespace st;

namespace {

Tensor ones(int64_t B) { return Tensor::ones({B, 3, 8}); }  // (B, T, C)

std::vector<float> rows(const Tensor& t, int64_t first, int64_t n) {
  return t.narrow(0, first, n).contiguous().to_float();
}

}  // namespace

TEST(DropoutContext, MaskFollowsTheSequenceNotTheMicroBatch) {
  auto gen = std::make_shared<Generator>(42);
  models::Dropout drop(0.5, gen, 0);
  Tensor whole, first, second;
  {
    runtime::DropoutScope s(7, 0);  // one process: sequences 0..3 in one batch
    whole = drop.forward(ones(4), true);
  }
  {
    runtime::DropoutScope s(7, 0);  // a replica's micro-batch: sequences 0, 1
    first = drop.forward(ones(2), true);
  }
  {
    runtime::DropoutScope s(7, 2);  // the next one: sequences 2, 3
    second = drop.forward(ones(2), true);
  }
  EXPECT_EQ(rows(whole, 0, 2), first.to_float());
  EXPECT_EQ(rows(whole, 2, 2), second.to_float());
  EXPECT_EQ(gen->offset(), 0u) << "scoped draws must not advance the generator";
  // some elements dropped, the rest scaled by 2
  int zeros = 0, twos = 0;
  for (float v : whole.to_float()) (v == 0.f ? zeros : twos) += (v == 0.f || v == 2.f) ? 1 : 0;
  EXPECT_GT(zeros, 10);
  EXPECT_GT(twos, 10);
  EXPECT_EQ(zeros + twos, 4 * 3 * 8);
}

TEST(DropoutContext, StepSiteAndCallGiveDifferentMasks) {
  auto gen = std::make_shared<Generator>(42);
  models::Dropout a(0.5, gen, 0), b(0.5, gen, 1);  // two sites
  Tensor a0, a0_again, a1, b0, a_second_call;
  {
    runtime::DropoutScope s(3, 0);
    a0 = a.forward(ones(2), true);
    a_second_call = a.forward(ones(2), true);  // the same site used twice in one forward
    b0 = b.forward(ones(2), true);
  }
  {
    runtime::DropoutScope s(3, 0);  // a new scope (e.g. a recomputed forward): calls count from 0
    a0_again = a.forward(ones(2), true);
  }
  {
    runtime::DropoutScope s(4, 0);
    a1 = a.forward(ones(2), true);
  }
  EXPECT_EQ(a0.to_float(), a0_again.to_float());
  EXPECT_NE(a0.to_float(), a1.to_float());
  EXPECT_NE(a0.to_float(), b0.to_float());
  EXPECT_NE(a0.to_float(), a_second_call.to_float());
}

TEST(DropoutContext, OutsideAScopeTheGeneratorAdvances) {
  auto gen = std::make_shared<Generator>(42);
  models::Dropout d(0.5, gen, 0);
  d.forward(ones(2), true);
  EXPECT_EQ(gen->offset(), 2u * 3 * 8);
  d.forward(ones(2), false);  // eval: identity, nothing drawn
  EXPECT_EQ(gen->offset(), 2u * 3 * 8);
}
