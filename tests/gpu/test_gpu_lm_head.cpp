// The fused, chunked LM head + cross-entropy on CUDA (ops/cuda/lm_head_loss.cu):
//   - against the CPU op on the same (rounded) inputs, f32 / f16 / bf16, forward and backward
//     (the gpu harness: relative norm error, GpuTol's defaults): uneven chunks with ignored rows
//     on the 16-byte path (V % 8 == 0) and the scalar one (V odd), i32 targets, and GPT-2's
//     padded vocabulary with the default chunk rule (several chunks in every dtype);
//   - against the unfused CUDA ops (matmul, then cross_entropy) on the same inputs: loss and
//     gradients to roundoff (tolerances below);
//   - an out-of-range target is a ValueError naming it, after the chunks;
//   - the memory property: at B·T = 8192 rows of GPT-2's head in bf16, the tensors allocated
//     by forward + backward stay within the closed form of one chunk of logits, dh and dw in f32
//     and the two gradients — below one (N, V) logits buffer, which the unfused ops allocate twice
//     (checked as the control). Prints both times.
#include <chrono>
#include <cstdio>

#include "ops/cross_entropy.h"
#include "ops/lm_head_loss.h"
#include "ops/matmul.h"
#include "tensor/autograd.h"
#include "tensor/cuda/runtime.h"
#include "tensor/memory_category.h"
#include "tensor/rng.h"
#include "tests/gpu/gpu_cases.h"

using namespace st;
using namespace st::test;

namespace {

Tensor targets_for(int64_t n, int64_t V, int64_t ignore_every, DType dt) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = (ignore_every && i % ignore_every == 3) ? -100 : (i * 7919 + 13) % V;
  return Tensor::from_vector(t, {n}).to(dt);
}

Tensor drawn(const Shape& s, uint64_t seed, float lo, float hi) {
  Tensor x = Tensor::empty(s);
  Generator g(seed, 0);
  fill_uniform(x, g, lo, hi);
  return x;
}

struct Result {
  double loss;
  std::vector<double> dh, dw;
};
// On CUDA in `dt`: the loss and the gradients of 0.3·loss (k = 0.3/count: not a power of two).
Result run(const Tensor& h32, const Tensor& w32, const Tensor& t, DType dt, bool fused) {
  Tensor h = h32.to(dt).to(Device::cuda).detach().requires_grad_(), w = w32.to(dt).to(Device::cuda).detach().requires_grad_();
  Tensor tc = t.to(Device::cuda);
  Tensor loss = fused ? ops::lm_head_cross_entropy(h, w, tc) : ops::cross_entropy(ops::matmul(h, w, false, true), tc);
  loss.backward(Tensor::full({}, 0.3, DType::f32, Device::cuda));
  return {loss.item(), h.grad().to_double(), w.grad().to_double()};
}

}  // namespace

TEST(GpuLmHead, EqualsTheCpuOpInEveryDtype) {
  for (int64_t V : {1000, 1001}) {  // the 16-byte path and the scalar one
    Tensor t = targets_for(300, V, 7, DType::i64);
    check_gpu({.name = "lm_head_cross_entropy (300,64)·(" + std::to_string(V) + ",64)ᵀ chunks of 128",
               .shapes = {{300, 64}, {V, 64}},
               .op = [t](auto& x) { return ops::lm_head_cross_entropy(x[0], x[1], t.to(x[0].device()), -100, 128); },
               .lo = -1.f, .hi = 1.f});
  }
  Tensor t32 = targets_for(77, 500, 5, DType::i32);
  check_gpu({.name = "lm_head_cross_entropy i32 targets, chunks of 9", .shapes = {{77, 40}, {500, 40}},
             .op = [t32](auto& x) { return ops::lm_head_cross_entropy(x[0], x[1], t32.to(x[0].device()), -100, 9); }});
  // GPT-2's padded vocabulary, default chunks: f32 512 rows, f16/bf16 1280 → 3 and 2 chunks of 1536 rows
  Tensor tg = targets_for(1536, 50257, 0, DType::i64);
  check_gpu({.name = "lm_head_cross_entropy GPT-2 vocabulary", .shapes = {{1536, 256}, {50304, 256}},
             .op = [tg](auto& x) { return ops::lm_head_cross_entropy(x[0], x[1], tg.to(x[0].device())); },
             .lo = -0.5f, .hi = 0.5f});
}

// Against the unfused CUDA ops. f32 (cuBLAS exact f32, not TF32): the sums over chunks regrouped,
// 1e-5 relative. f16 / bf16 are held to the f32 result instead of to each other: the unfused CUDA
// path writes dlogits = (softmax − onehot)/N in the low-precision dtype, ~1/(V·N) = 4e-8 here, below
// f16's smallest normal (6e-5) and near its smallest subnormal (6e-8), so its f16 gradient is
// mostly rounding (the H200 run of 94a899e: 1.4e-2 from the fused one, which scales dlogits by
// σ = 2¹⁵ and keeps its products in f32). The fused path must be within 1e-2 of f32 (one rounding
// of bf16, 2⁻⁸, on norms, with margin) and no worse than the unfused one (+1e-3); the loss (summed
// in double from f32 row losses in both) to 1e-3.
TEST(GpuLmHead, EqualsTheUnfusedOpsToRoundoff) {
  const int64_t N = 3000, C = 128, V = 8000;  // by default one chunk (8192 rows in bf16): force several
  const int64_t prev = ops::set_lm_head_chunk_bytes(int64_t{4} << 20);  // 4 MiB: 256 rows in bf16, 12 chunks
  Tensor h = drawn({N, C}, 1, -1.f, 1.f), w = drawn({V, C}, 2, -0.5f, 0.5f);
  Tensor t = targets_for(N, V, 11, DType::i64);
  const Result ref = run(h, w, t, DType::f32, false);  // the unfused f32 ops
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const Result a = run(h, w, t, dt, true), b = run(h, w, t, dt, false);
    EXPECT_NEAR(a.loss, b.loss, (dt == DType::f32 ? 1e-6 : 1e-3) * std::fabs(b.loss)) << dtype_name(dt);
    if (dt == DType::f32) {
      EXPECT_LT(rel_err(a.dh, b.dh), 1e-5);
      EXPECT_LT(rel_err(a.dw, b.dw), 1e-5);
    } else {
      EXPECT_LT(rel_err(a.dh, ref.dh), 1e-2) << dtype_name(dt);
      EXPECT_LT(rel_err(a.dw, ref.dw), 1e-2) << dtype_name(dt);
      EXPECT_LE(rel_err(a.dh, ref.dh), rel_err(b.dh, ref.dh) + 1e-3) << dtype_name(dt);
      EXPECT_LE(rel_err(a.dw, ref.dw), rel_err(b.dw, ref.dw) + 1e-3) << dtype_name(dt);
    }
    std::printf("%s: loss %.7f vs %.7f; |dh − f32| fused %.2e unfused %.2e, |dw − f32| fused %.2e unfused %.2e\n",
                dtype_name(dt), a.loss, b.loss, rel_err(a.dh, ref.dh), rel_err(b.dh, ref.dh), rel_err(a.dw, ref.dw),
                rel_err(b.dw, ref.dw));
  }
  ops::set_lm_head_chunk_bytes(prev);
}

TEST(GpuLmHead, RejectsAnOutOfRangeTargetAfterTheChunks) {
  Tensor h = Tensor::zeros({6, 8}, DType::f32, Device::cuda), w = Tensor::zeros({10, 8}, DType::f32, Device::cuda);
  Tensor t = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4, 10, 5}, {6}, Device::cuda);
  try {
    ops::lm_head_cross_entropy(h, w, t, -100, 4);  // row 4: the second chunk
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("target 10 at position 4"), std::string::npos) << e.what();
  }
}

// GPT-2's head in bf16 at B·T = 8192 rows: the tensors forward + backward allocate beyond the
// inputs, at their peak, against the closed form
//   chunk (1280, V)·2 + dh (N, C)·4 + dw (V, C)·4 + the gradients (N, C)·2 + (V, C)·2
//   + the row losses, flags and scalars (2·N·4 + 64) + 1 KiB of allocator rounding
// = 398.4 MB (the forward's moment, 308.5 MB, is the largest: in backward dh and dw in f32 are
// released as their casts are made), below one (N, V) bf16 buffer (824.2 MB): a full logits
// buffer fails it. The unfused
// ops allocate at least the logits and their gradient, 2·N·V·2 (the control: the measurement
// sees them).
TEST(GpuLmHead, NeverHoldsTheFullLogits) {
  const int64_t N = 8192, C = 768, V = 50304;
  Tensor h32 = drawn({N, C}, 3, -1.f, 1.f), w32 = drawn({V, C}, 4, -0.05f, 0.05f);
  Tensor t = targets_for(N, 50257, 0, DType::i64).to(Device::cuda);
  Tensor h = h32.to(DType::bf16).to(Device::cuda).detach().requires_grad_(), w = w32.to(DType::bf16).to(Device::cuda).detach().requires_grad_();
  auto measure = [&](bool fused) {
    h.zero_grad(true);
    w.zero_grad(true);
    cuda::synchronize();
    const size_t before = memory_usage(Device::cuda).total_in_use;
    reset_memory_peaks(Device::cuda);
    const auto t0 = std::chrono::steady_clock::now();
    {
      Tensor loss = fused ? ops::lm_head_cross_entropy(h, w, t) : ops::cross_entropy(ops::matmul(h, w, false, true), t);
      loss.backward();
    }
    cuda::synchronize();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const double extra = static_cast<double>(memory_usage(Device::cuda).total_peak - before);
    std::printf("%s head + loss, N %lld: %.1f MB beyond the inputs at peak, %.2f ms (forward + backward)\n",
                fused ? "fused" : "unfused", static_cast<long long>(N), extra / 1e6, ms);
    return extra;
  };
  measure(true);  // warm-up: cuBLAS handles and workspace, kernels loaded
  const double fused = measure(true), unfused = measure(false);
  const double rows = static_cast<double>(ops::lm_head_chunk_rows(V, DType::bf16));
  const double closed = rows * V * 2 + N * C * 4.0 + V * C * 4.0 + N * C * 2.0 + V * C * 2.0 + 2.0 * N * 4 + 64 + 1024;
  EXPECT_EQ(rows, 1280);
  EXPECT_LE(fused, closed);
  EXPECT_LT(closed, static_cast<double>(N) * V * 2);  // so a full logits buffer cannot fit the bound
  EXPECT_GE(unfused, 2.0 * N * V * 2);
}
