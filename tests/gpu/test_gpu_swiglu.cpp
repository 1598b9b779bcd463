// CUDA SwiGLU and SiLU (ops/swiglu.h, ops/activation.h; ops/cuda/swiglu.cu):
//   - against the CPU op (the harness's check_gpu: f32 / f16 / bf16, forward and d(gu)) on packed
//     rows (F = 64, Llama 7B's 11008) and element-wise ones (F = 257, a shifted gu);
//   - bit for bit against the unfused CUDA ops::mul(ops::silu(gate), up) on gu's two halves, on
//     both paths, in every dtype.
#include <string>

#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/swiglu.h"
#include "tensor/autograd.h"
#include "tensor/rng.h"
#include "tests/gpu/gpu_cases.h"

using namespace st;
using namespace st::test;

// Tolerances: check_gpu's defaults (relative norm error 1e-5 f32, 1e-2 f16, 4e-2 bf16): in f32 CUDA's
// expf (≤ 2 ulp) against the CPU's exp_f32 (≤ 1 ulp) moves silu by a few ulps; in f16 / bf16 the
// CUDA op rounds silu and the product (dy·u and the gradients) where the reference is the f32 op,
// ≤ 2⁻¹⁰ / 2⁻⁷ per element.
TEST(GpuSwiglu, MatchesTheCpuOp) {
  check_gpu({.name = "silu", .shapes = {{1000, 257}}, .op = [](auto& x) { return ops::silu(x[0]); },
             .lo = -6, .hi = 6});
  for (int64_t F : {64, 257, 11008}) {
    const int64_t M = F == 11008 ? 32 : 1000;
    check_gpu({.name = "swiglu (" + std::to_string(M) + ", 2·" + std::to_string(F) + ")", .shapes = {{M, 2 * F}},
               .op = [](auto& x) { return ops::swiglu(x[0]); }, .lo = -6, .hi = 6});
  }
  check_gpu({.name = "swiglu of a shifted gu (1000, 2·64)", .shapes = {{1000 * 128 + 1}},
             .op = [](auto& x) { return ops::swiglu(x[0].narrow(0, 1, 1000 * 128).view({1000, 128})); },
             .lo = -6, .hi = 6});
}

namespace {

struct Out {
  std::vector<double> y, dgu;
};

// gu (M, 2F) a leaf on the GPU `shift` elements into its buffer; y fused or unfused; backward
// with a fixed cotangent
Out run(bool fused, DType dt, int64_t M, int64_t F, int64_t shift) {
  Generator g(41 + static_cast<uint64_t>(F));
  Tensor h = Tensor::empty({M, 2 * F}), uh = Tensor::empty({M, F});
  fill_uniform(h, g, -6.f, 6.f);
  fill_uniform(uh, g, -1.f, 1.f);
  Tensor buf = Tensor::zeros({M * 2 * F + shift}, dt, Device::cuda);
  buf.narrow(0, shift, M * 2 * F).copy_(h.reshape({-1}));
  Tensor gu = buf.narrow(0, shift, M * 2 * F).view({M, 2 * F}).detach();
  gu.requires_grad_();
  Tensor y = fused ? ops::swiglu(gu) : ops::mul(ops::silu(gu.narrow(1, 0, F)), gu.narrow(1, F, F));
  y.backward(uh.to(dt).to(Device::cuda));
  return {y.to_double(), gu.grad().to_double()};
}

}  // namespace

TEST(GpuSwiglu, BitIdenticalToSiluTimesUp) {
  struct Case {
    int64_t M, F, shift;
  };
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (Case c : {Case{1000, 64, 0}, Case{333, 257, 0}, Case{32, 11008, 0}, Case{1000, 64, 1}}) {
      const std::string what = std::string(dtype_name(dt)) + " (" + std::to_string(c.M) + ", 2·" +
                               std::to_string(c.F) + ") shift " + std::to_string(c.shift);
      Out f = run(true, dt, c.M, c.F, c.shift), u = run(false, dt, c.M, c.F, c.shift);
      EXPECT_EQ(f.y, u.y) << what;  // element bits, no tolerance
      EXPECT_EQ(f.dgu, u.dgu) << what;
    }
}
