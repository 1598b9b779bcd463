// CUDA elementwise, reductions and GEMM against the CPU ops: f32 / f16 / bf16, forward and
// backward, broadcasting, every transpose, batched and shared-weight products, sizes that are
// not multiples of any tile (257, 1000, 65). The bias add (row broadcast) and its gradient (the
// column sum) run on aligned shapes (16384×768, 4×3×2304: 16-byte packs) and on odd shapes or
// views at an odd element offset (the scalar fallbacks).
#include <cmath>
#include <cstdio>

#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/mean.h"
#include "ops/reduce.h"
#include "tensor/rng.h"
#include "tests/gpu/gpu_cases.h"

using namespace st;
using namespace st::test;

TEST(GpuOps, BinaryWithBroadcast) {
  check_gpu({.name = "add (1000,257)+(257)", .shapes = {{1000, 257}, {257}},
             .op = [](auto& x) { return ops::add(x[0], x[1]); }});
  check_gpu({.name = "sub (3,1,257)-(5,1)", .shapes = {{3, 1, 257}, {5, 1}},
             .op = [](auto& x) { return ops::sub(x[0], x[1]); }});
  check_gpu({.name = "mul (7,33)*(7,33)", .shapes = {{7, 33}, {7, 33}},
             .op = [](auto& x) { return ops::mul(x[0], x[1]); }});
  check_gpu({.name = "div (9,257)/(9,1)", .shapes = {{9, 257}, {9, 1}},
             .op = [](auto& x) { return ops::div(x[0], x[1]); }, .lo = 0.5f, .hi = 2.f});
  check_gpu({.name = "scale", .shapes = {{1000, 257}}, .op = [](auto& x) { return ops::scale(x[0], -1.75); }});
}

namespace {
Tensor binary(int op, const Tensor& a, const Tensor& b) {
  switch (op) {
    case 0: return ops::add(a, b);
    case 1: return ops::sub(a, b);
    case 2: return ops::mul(a, b);
    default: return ops::div(a, b);
  }
}
const char* const kOpNames[] = {"add", "sub", "mul", "div"};
// x (1-d, n + 1 elements) → the (rows, cols...) view that starts one element in: contiguous, not
// 16-byte aligned for any dtype.
Tensor shifted(const Tensor& x, const Shape& shape) { return x.narrow(0, 1, x.numel() - 1).view(shape); }
}  // namespace

TEST(GpuOps, BiasAddEveryOpBothOrders) {
  // full ∘ bias and bias ∘ full; backward sums the bias gradient over the leading dims
  const std::pair<Shape, Shape> shapes[] = {{{1000, 257}, {257}}, {{4, 3, 2304}, {2304}}, {{16384, 768}, {768}}};
  for (const auto& [full, bias] : shapes)
    for (int op = 0; op < 4; ++op) {
      const bool big = full[0] == 16384;
      if (big && op == 1) continue;  // sub is add's kernel with another functor: small shapes suffice
      const float lo = op == 3 ? 0.5f : -1.f, hi = op == 3 ? 2.f : 1.f;
      const std::string name = std::string(kOpNames[op]) + " " + shape_str(full) + " ∘ " + shape_str(bias);
      check_gpu({.name = name, .shapes = {full, bias},
                 .op = [op](auto& x) { return binary(op, x[0], x[1]); }, .lo = lo, .hi = hi});
      check_gpu({.name = "reversed " + name, .shapes = {bias, full},
                 .op = [op](auto& x) { return binary(op, x[0], x[1]); }, .lo = lo, .hi = hi});
    }
}

TEST(GpuOps, BiasAddOnMisalignedViews) {
  // operand, bias or both one element into their storage: the scalar row-broadcast path
  for (int64_t N : {768, 257}) {
    const int64_t M = N == 768 ? 16384 : 1000;
    const std::string sz = " (" + std::to_string(M) + "," + std::to_string(N) + ")";
    check_gpu({.name = "add shifted x" + sz, .shapes = {{M * N + 1}, {N}},
               .op = [M, N](auto& x) { return ops::add(shifted(x[0], {M, N}), x[1]); }});
    check_gpu({.name = "mul shifted bias" + sz, .shapes = {{M, N}, {N + 1}},
               .op = [N](auto& x) { return ops::mul(x[0], shifted(x[1], {N})); }});
    check_gpu({.name = "div bias by shifted x" + sz, .shapes = {{N}, {M * N + 1}},
               .op = [M, N](auto& x) { return ops::div(x[0], shifted(x[1], {M, N})); }, .lo = 0.5f, .hi = 2.f});
  }
  check_gpu({.name = "same-shape add, both shifted", .shapes = {{16384 * 768 + 1}, {16384 * 768 + 1}},
             .op = [](auto& x) { return ops::add(shifted(x[0], {16384, 768}), shifted(x[1], {16384, 768})); }});
  check_gpu({.name = "same-shape mul (16384,768)", .shapes = {{16384, 768}, {16384, 768}},
             .op = [](auto& x) { return ops::mul(x[0], x[1]); }});
  check_gpu({.name = "add of a bias row at an odd offset (1,257)", .shapes = {{1000, 257}, {2, 257}},
             .op = [](auto& x) { return ops::add(x[0], x[1].narrow(0, 1, 1).view({1, 257})); }});
}

TEST(GpuOps, BinaryOnStridedViews) {
  check_gpu({.name = "add of a transpose", .shapes = {{257, 31}, {31, 257}},
             .op = [](auto& x) { return ops::add(x[0].transpose(0, 1), x[1]); }});
}

TEST(GpuOps, Reductions) {
  check_gpu({.name = "sum dims {0,2}", .shapes = {{5, 257, 9}}, .op = [](auto& x) { return ops::sum(x[0], {0, 2}); }});
  check_gpu({.name = "sum all", .shapes = {{1000, 257}}, .op = [](auto& x) { return ops::sum(x[0]); }},
            {.f32 = 1e-5, .f16 = 1e-2, .bf16 = 4e-2});
  check_gpu({.name = "mean last keepdim", .shapes = {{1000, 257}},
             .op = [](auto& x) { return ops::mean(x[0], {-1}, true); }});
  check_gpu({.name = "sum of a transposed view", .shapes = {{33, 65}},
             .op = [](auto& x) { return ops::sum(x[0].transpose(0, 1), {1}); }});
}

TEST(GpuOps, ArgmaxEqualsTheCpuOp) {
  // GPT-2's vocabulary width (not a multiple of the block), ties planted across thread slices
  // (columns 3 and 3 + 256 and 50000 share the row maximum: the first must win), NaN in a row.
  const int64_t R = 33, V = 50257;
  Generator g(11, 0);
  Tensor x = Tensor::empty({R, V});
  fill_normal(x, g);
  std::vector<float> v = x.to_float();
  for (int64_t c : {3, 3 + 256, 50000}) v[5 * V + c] = 100.f;
  v[7 * V + 0] = std::nanf("");
  v[7 * V + 999] = 50.f;
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    Tensor h = Tensor::from_vector(v, {R, V}).to(dt);
    const Tensor cpu = ops::argmax(h), gpu = ops::argmax(h.to(Device::cuda)).to(Device::cpu);
    for (int64_t r = 0; r < R; ++r) EXPECT_EQ(gpu.data<int64_t>()[r], cpu.data<int64_t>()[r]) << "row " << r << " " << dtype_name(dt);
    EXPECT_EQ(gpu.data<int64_t>()[5], 3);
    EXPECT_EQ(gpu.data<int64_t>()[7], 999);
  }
}

TEST(GpuOps, ColumnSumsOverLeadingDims) {
  // contiguous x with the leading dims reduced: the column-sum path (packs when aligned)
  check_gpu({.name = "sum dim 0 (1000,257)", .shapes = {{1000, 257}}, .op = [](auto& x) { return ops::sum(x[0], {0}); }});
  check_gpu({.name = "sum dim 0 (16384,768)", .shapes = {{16384, 768}},
             .op = [](auto& x) { return ops::sum(x[0], {0}); }});
  check_gpu({.name = "sum dims {0,1} (4,3,2304)", .shapes = {{4, 3, 2304}},
             .op = [](auto& x) { return ops::sum(x[0], {0, 1}); }});
  check_gpu({.name = "sum dims {0,1} keepdim (5,7,257)", .shapes = {{5, 7, 257}},
             .op = [](auto& x) { return ops::sum(x[0], {0, 1}, true); }});
  check_gpu({.name = "sum dim 0 (1,4,2304) with a size-1 lead", .shapes = {{1, 4, 2304}},
             .op = [](auto& x) { return ops::sum(x[0], {0, 1}); }});
  check_gpu({.name = "sum dim 0 (16384,3)", .shapes = {{16384, 3}}, .op = [](auto& x) { return ops::sum(x[0], {0}); }});
  check_gpu({.name = "mean dim 0 (16384,768)", .shapes = {{16384, 768}},
             .op = [](auto& x) { return ops::mean(x[0], {0}); }});
  // misaligned contiguous views: the scalar column-sum path
  check_gpu({.name = "sum dim 0 of a shifted (16384,768)", .shapes = {{16384 * 768 + 1}},
             .op = [](auto& x) { return ops::sum(shifted(x[0], {16384, 768}), {0}); }});
  check_gpu({.name = "sum dims {0,1} of a shifted (4,3,2304)", .shapes = {{4 * 3 * 2304 + 1}},
             .op = [](auto& x) { return ops::sum(shifted(x[0], {4, 3, 2304}), {0, 1}); }});
  // not contiguous: the general kernel
  check_gpu({.name = "sum dim 0 of a narrowed (1000,258)", .shapes = {{1000, 258}},
             .op = [](auto& x) { return ops::sum(x[0].narrow(1, 1, 257), {0}); }});
}

TEST(GpuOps, MatmulEveryTransposeAndBatch) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Shape sa = ta ? Shape{3, 65, 257} : Shape{3, 257, 65}, sb = tb ? Shape{3, 130, 65} : Shape{3, 65, 130};
      check_gpu({.name = std::string("batched matmul ta=") + (ta ? "1" : "0") + " tb=" + (tb ? "1" : "0"),
                 .shapes = {sa, sb},
                 .op = [ta, tb](auto& x) { return ops::matmul(x[0], x[1], ta, tb); }});
    }
  check_gpu({.name = "shared 2-d weight", .shapes = {{2, 100, 65}, {65, 33}},
             .op = [](auto& x) { return ops::matmul(x[0], x[1]); }});
  check_gpu({.name = "linear with bias", .shapes = {{4, 250, 257}, {257, 96}, {96}},
             .op = [](auto& x) { return ops::linear(x[0], x[1], x[2]); }});
}

// TF32 (--tf32 1, set_gemm_allow_tf32) against the CPU's exact f32 product, element by element,
// on a K = 1024 product of normal inputs. Bound per element, with S = Σ_k |a_ik|·|b_kj| (itself an
// exact-enough f32 product of the absolute values):
//   off: |gpu − cpu| ≤ 2·K·2^-24·S — both sides are f32 sums of the same K products in different
//        orders, each within K·u·S of the exact sum (u = 2^-24, the f32 unit roundoff).
//   on:  |gpu − cpu| ≤ (2^-9 + 2·K·2^-24)·S — TF32 keeps 10 of f32's 23 mantissa bits; each input
//        is rounded to it with relative error ≤ 2^-11 (round to nearest; 2^-10 if the hardware
//        truncated), so each product a·b is off by ≤ (1 + 2^-10)² − 1 ≈ 2^-9 relative (truncation,
//        the worse case), summed into S; accumulation stays f32 (the second term).
// TF32 on must also really be on: its largest error exceeds the f32 bound (a switch that does
// nothing fails here), and switching it off again restores the exact product.
TEST(GpuOps, MatmulTf32IsOptInAndWithinItsBound) {
  const int64_t M = 96, K = 1024, N = 80;
  Generator g(7, 0);
  Tensor a = Tensor::empty({M, K}), b = Tensor::empty({K, N});  // (M, K), (K, N) f32 on the CPU
  fill_normal(a, g);
  fill_normal(b, g);
  std::vector<float> av = a.to_float(), bv = b.to_float(), aa(av.size()), ba(bv.size());
  for (size_t i = 0; i < av.size(); ++i) aa[i] = std::fabs(av[i]);
  for (size_t i = 0; i < bv.size(); ++i) ba[i] = std::fabs(bv[i]);
  const std::vector<float> ref = ops::matmul(a, b).to_float();  // (M, N) exact f32
  const std::vector<float> S = ops::matmul(Tensor::from_vector(aa, {M, K}), Tensor::from_vector(ba, {K, N})).to_float();
  auto worst = [&](double rel_bound) {  // largest |gpu − cpu| / S, and whether every element is within rel_bound·S
    const std::vector<float> out = ops::matmul(a.to(Device::cuda), b.to(Device::cuda)).to(Device::cpu).to_float();
    double w = 0;
    bool ok = true;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double e = std::fabs(static_cast<double>(out[i]) - ref[i]);
      w = std::max(w, e / S[i]);
      ok = ok && e <= rel_bound * S[i];
    }
    return std::make_pair(w, ok);
  };
  const double f32_bound = 2.0 * K * std::ldexp(1.0, -24), tf32_bound = std::ldexp(1.0, -9) + f32_bound;
  ASSERT_FALSE(ops::cuda::gemm_allow_tf32());  // the default: exact f32
  auto [off, off_ok] = worst(f32_bound);
  EXPECT_TRUE(off_ok) << "TF32 off: worst |gpu - cpu| / S " << off << " > " << f32_bound;
  ops::cuda::set_gemm_allow_tf32(true);
  auto [on, on_ok] = worst(tf32_bound);
  ops::cuda::set_gemm_allow_tf32(false);
  EXPECT_TRUE(on_ok) << "TF32 on: worst |gpu - cpu| / S " << on << " > " << tf32_bound;
  // Random inputs cannot tell TF32 from f32: their rounding errors mostly cancel (measured 5.5e-5, under
  // the f32 bound, on the H200). An input whose low mantissa bits TF32 must drop can: 1 + 2^-12 has its
  // last set bit 12 places down, TF32 keeps 10, so every product loses exactly 2^-12 and the sum of
  // K = 128 of them is 128 + 2^-5 in f32 (exact) but 128 under TF32 — a relative error of 2.4e-4,
  // sixteen times the f32 bound of 2·128·2^-24.
  const int64_t D = 128;
  const Tensor ones_eps = Tensor::from_vector(std::vector<float>(D * D, 1.0f + std::ldexp(1.0f, -12)), {D, D});
  const Tensor ones = Tensor::from_vector(std::vector<float>(D * D, 1.0f), {D, D});
  auto corner = [&] {  // (0, 0) of the (D, D) product on the GPU
    return ops::matmul(ones_eps.to(Device::cuda), ones.to(Device::cuda)).to(Device::cpu).to_float()[0];
  };
  const float exact = 128.0f + std::ldexp(1.0f, -5);
  EXPECT_EQ(corner(), exact) << "TF32 off must be exact f32 on this input";
  ops::cuda::set_gemm_allow_tf32(true);
  const float rounded = corner();
  ops::cuda::set_gemm_allow_tf32(false);
  EXPECT_EQ(rounded, 128.0f) << "TF32 on gave " << rounded << ": the switch does not reach cuBLAS";
  auto [again, again_ok] = worst(f32_bound);
  EXPECT_TRUE(again_ok) << "TF32 switched off again: worst " << again;
  std::printf("f32 GEMM K %lld: worst |gpu - cpu| / S: exact %.3g (bound %.3g), TF32 %.3g (bound %.3g)\n",
              (long long)K, off, f32_bound, on, tf32_bound);
}
