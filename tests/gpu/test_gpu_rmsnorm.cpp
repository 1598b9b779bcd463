// CUDA RMS norm and residual add + RMS norm (ops/rmsnorm.h, ops/add_rmsnorm.h; ops/cuda/
// rmsnorm_rows.cuh):
//   - against the CPU op (the harness's check_gpu: f32 / f16 / bf16, forward and every gradient;
//     add_rmsnorm on cat(r, y), so the backward gets dr and dy together, with and without a), on
//     the packed rows (C = 64, 768, 4096: Llama's width) and the element-wise ones (C = 257, a
//     shifted x);
//   - the packed and element-wise loads give the same bits (x shifted by one element against the
//     aligned x), so the results do not depend on alignment;
//   - add_rmsnorm bit for bit against the unfused CUDA ops (add, rmsnorm, autograd's sum of r's
//     gradients): gradients on r and y, on y only, on r only; aligned and shifted x and a;
//   - dw is the same bits run to run (fixed-order sums, no atomics).
#include <string>

#include "ops/add_rmsnorm.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "ops/rmsnorm.h"
#include "tensor/autograd.h"
#include "tensor/rng.h"
#include "tests/gpu/gpu_cases.h"

using namespace st;
using namespace st::test;

namespace {

Tensor both(const ops::ResidualNorm& o) { return Tensor::cat({o.r.reshape({-1}), o.y.reshape({-1})}, 0); }

// A contiguous (shape) view that starts `shift` elements into a buffer of its own on the GPU, a
// leaf holding host's values (shift 1: not 16-byte aligned for any dtype).
Tensor device_leaf(const Tensor& host, DType dt, int64_t shift) {
  const int64_t n = host.numel();
  Tensor buf = Tensor::zeros({n + shift}, dt, Device::cuda);
  buf.narrow(0, shift, n).copy_(host.reshape({n}));
  Tensor t = buf.narrow(0, shift, n).view(host.shape()).detach();
  t.requires_grad_();
  return t;
}

Tensor host_uniform(Generator& g, Shape s, float lo, float hi) {
  Tensor t = Tensor::empty(s);
  fill_uniform(t, g, lo, hi);
  return t;
}

}  // namespace

// Tolerances: check_gpu's defaults (relative norm error 1e-5 f32, 1e-2 f16, 4e-2 bf16), as
// layernorm's gpu cases: f32 differs from the CPU by the sum's order (double there, f32 warp sums
// here) and rsqrtf (2 ulp) against 1/√ — a few 1e-7; in f16 / bf16 the CUDA op rounds y twice and
// the gradients once where the CPU reference is the f32 op, ≤ 2⁻¹⁰ / 2⁻⁷ per element.
TEST(GpuRmsnorm, MatchesTheCpuOp) {
  for (int64_t C : {64, 257, 768, 4096}) {
    const int64_t N = C == 4096 ? 64 : 333;
    const std::string c = " (" + std::to_string(N) + "," + std::to_string(C) + ")";
    check_gpu({.name = "rmsnorm" + c, .shapes = {{N, C}, {C}}, .op = [](auto& x) { return ops::rmsnorm(x[0], x[1]); }});
    check_gpu({.name = "add_rmsnorm" + c, .shapes = {{N, C}, {N, C}, {C}},
               .op = [](auto& x) { return both(ops::add_rmsnorm(x[0], x[1], x[2])); }});
    check_gpu({.name = "add_rmsnorm without a" + c, .shapes = {{N, C}, {C}},
               .op = [](auto& x) { return both(ops::add_rmsnorm(x[0], Tensor(), x[1])); }});
  }
  check_gpu({.name = "rmsnorm of a shifted x C=768", .shapes = {{1000 * 768 + 1}, {768}},
             .op = [](auto& x) { return ops::rmsnorm(x[0].narrow(0, 1, 1000 * 768).view({1000, 768}), x[1]); }});
}

TEST(GpuRmsnorm, AlignmentDoesNotChangeTheBits) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (int64_t C : {64, 4096}) {
      Generator g(13);
      Tensor xh = host_uniform(g, {97, C}, -2.f, 2.f), wh = host_uniform(g, {C}, 0.5f, 1.5f),
             uh = host_uniform(g, {97, C}, -1.f, 1.f);
      std::vector<double> out[2][3];
      for (int64_t shift : {0, 1}) {
        Tensor x = device_leaf(xh, dt, shift), w = device_leaf(wh, dt, 0);
        Tensor y = ops::rmsnorm(x, w);
        y.backward(device_leaf(uh, dt, shift).detach());  // dy misaligned too
        out[shift][0] = y.to_double();
        out[shift][1] = x.grad().to_double();
        out[shift][2] = w.grad().to_double();
      }
      const std::string what = std::string(dtype_name(dt)) + " C=" + std::to_string(C);
      EXPECT_EQ(out[0][0], out[1][0]) << what << " y";
      EXPECT_EQ(out[0][1], out[1][1]) << what << " dx";
      EXPECT_EQ(out[0][2], out[1][2]) << what << " dw";
    }
}

namespace {

struct Grads {
  std::vector<double> r, y, dx, da, dw;
};
enum class Used { both, y_only, r_only };

Grads run(bool fused, DType dt, int64_t N, int64_t C, int64_t shift, bool with_a, Used used) {
  Generator g(31 + static_cast<uint64_t>(C));
  Tensor x = device_leaf(host_uniform(g, {N, C}, -2.f, 2.f), dt, shift);
  Tensor a = device_leaf(host_uniform(g, {N, C}, -1.f, 1.f), dt, shift);
  Tensor w = device_leaf(host_uniform(g, {C}, 0.5f, 1.5f), dt, 0);
  Tensor ur = host_uniform(g, {N, C}, -1.f, 1.f).to(dt).to(Device::cuda);
  Tensor uy = host_uniform(g, {N, C}, -1.f, 1.f).to(dt).to(Device::cuda);
  Tensor xin = x.view({N, C});  // a non-leaf, as in a model
  Tensor r, y;
  if (fused) {
    ops::ResidualNorm o = ops::add_rmsnorm(xin, with_a ? a : Tensor(), w);
    r = o.r;
    y = o.y;
  } else {
    r = with_a ? ops::add(xin, a) : xin;
    y = ops::rmsnorm(r, w);
  }
  std::vector<Tensor> terms;
  if (used != Used::y_only) terms.push_back(ops::mul(r, ur));
  if (used != Used::r_only) terms.push_back(ops::mul(y, uy));
  Tensor loss_in = terms.size() == 2 ? Tensor::cat({terms[0], terms[1]}, 0) : terms[0];
  loss_in.backward(Tensor::ones(loss_in.shape(), dt, Device::cuda));
  auto grad = [](const Tensor& t) { return t.grad().defined() ? t.grad().to_double() : std::vector<double>{}; };
  return {r.to_double(), y.to_double(), grad(x), grad(a), grad(w)};
}

}  // namespace

TEST(GpuAddRmsnorm, BitIdenticalToTheUnfusedCudaOps) {
  struct Case {
    int64_t N, C, shift;
  };
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (Case s : {Case{333, 64, 0}, Case{333, 257, 0}, Case{64, 4096, 0}, Case{1000, 768, 1}})
      for (bool with_a : {true, false})
        for (Used used : {Used::both, Used::y_only, Used::r_only}) {
          const std::string what = std::string(dtype_name(dt)) + " (" + std::to_string(s.N) + ", " +
                                   std::to_string(s.C) + ") shift " + std::to_string(s.shift) +
                                   (with_a ? "" : " no a") + " used " + std::to_string(int(used));
          Grads f = run(true, dt, s.N, s.C, s.shift, with_a, used), u = run(false, dt, s.N, s.C, s.shift, with_a, used);
          ASSERT_FALSE(f.dx.empty()) << what;
          EXPECT_EQ(f.r, u.r) << what;  // element bits, no tolerance
          EXPECT_EQ(f.y, u.y) << what;
          EXPECT_EQ(f.dx, u.dx) << what;
          EXPECT_EQ(f.da, u.da) << what;
          EXPECT_EQ(f.dw, u.dw) << what;
        }
}

TEST(GpuRmsnorm, WeightGradIsDeterministic) {
  for (DType dt : {DType::f32, DType::bf16}) {
    Generator g(3);
    Tensor x = Tensor::empty({8192, 4096}, dt, Device::cuda), w = Tensor::empty({4096}, dt, Device::cuda),
           u = Tensor::empty({8192, 4096}, dt, Device::cuda);
    for (Tensor* t : {&x, &w, &u}) fill_uniform(*t, g);
    std::vector<double> first[2];
    for (int rep = 0; rep < 3; ++rep) {
      Tensor xr = x.detach().requires_grad_(), wr = w.detach().requires_grad_();
      ops::sum(ops::mul(ops::rmsnorm(xr, wr), u)).backward();
      std::vector<double> now[2] = {xr.grad().to_double(), wr.grad().to_double()};
      for (int k = 0; k < 2; ++k) {
        if (rep == 0) first[k] = now[k];
        else EXPECT_EQ(now[k], first[k]) << dtype_name(dt) << " gradient " << k << " rep " << rep;
      }
    }
  }
}
