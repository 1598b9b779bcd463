// CUDA optimizer kernels against the CPU ones: AdamW (f32 master, with f16/bf16 grads and the
// low-precision copy written in the same pass) and SGD bit for bit; sum_squares, has_inf_nan,
// scale_.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/optim.h"
#include "tensor/rng.h"

using namespace st;

namespace {
Tensor rand(const Shape& s, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  Generator g(seed);
  Tensor t = Tensor::empty(s);
  fill_uniform(t, g, lo, hi);
  return t;
}
}  // namespace

TEST(GpuOptim, AdamWMatchesTheCpuBitForBit) {
  const Shape s{1000, 257};
  for (DType gdt : {DType::f32, DType::bf16, DType::f16}) {
    Tensor p = rand(s, 1), m = rand(s, 2, -0.1f, 0.1f), v = rand(s, 3, 0.f, 0.01f);
    Tensor pg = p.to(Device::cuda), mg = m.to(Device::cuda), vg = v.to(Device::cuda);
    Tensor lp = Tensor::empty(s, DType::bf16, Device::cuda);
    ops::AdamWParams hp{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (int64_t step = 1; step <= 3; ++step) {
      Tensor g = rand(s, 10 + step).to(gdt);
      Tensor gg = g.to(Device::cuda);
      ops::adamw_step(p, g, m, v, hp, step);
      ops::adamw_step(pg, gg, mg, vg, hp, step, lp);
    }
    EXPECT_EQ(pg.to_double(), p.to_double()) << "grad " << dtype_name(gdt);
    EXPECT_EQ(mg.to_double(), m.to_double());
    EXPECT_EQ(vg.to_double(), v.to_double());
    EXPECT_EQ(lp.to_double(), p.to(DType::bf16).to_double());
  }
}

TEST(GpuOptim, SgdMatchesTheCpu) {
  const Shape s{333, 257};
  Tensor p = rand(s, 1), buf = Tensor::zeros(s);
  Tensor pg = p.to(Device::cuda), bg = buf.to(Device::cuda);
  for (int step = 0; step < 3; ++step) {
    Tensor g = rand(s, 20 + step);
    ops::sgd_step(p, g, buf, 0.1f, 0.9f, 0.01f, step == 0);
    ops::sgd_step(pg, g.to(Device::cuda), bg, 0.1f, 0.9f, 0.01f, step == 0);
  }
  EXPECT_EQ(pg.to_double(), p.to_double());
}

TEST(GpuOptim, SumSquaresInfNanScale) {
  Tensor x = rand({1000, 257}, 5);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    Tensor xc = x.to(dt), xg = xc.to(Device::cuda);
    const double cpu = ops::sum_squares(xc), gpu = ops::sum_squares(xg);
    EXPECT_NEAR(gpu, cpu, 1e-9 * cpu) << dtype_name(dt);
    EXPECT_FALSE(ops::has_inf_nan(xg));
    Tensor bad = xg.clone();
    bad.view({-1}).narrow(0, 256999, 1).fill_(dt == DType::f32 ? NAN : INFINITY);
    EXPECT_TRUE(ops::has_inf_nan(bad)) << dtype_name(dt);
    Tensor sc = xc.clone(), sg = xg.clone();
    ops::scale_(sc, 0.37);
    ops::scale_(sg, 0.37);
    EXPECT_EQ(sg.to_double(), sc.to_double());
  }
  EXPECT_NEAR(ops::sum_squares(Tensor::full({3, 4}, 2.0, DType::f32, Device::cuda)), 48.0, 0);
}
