// CUDA op benchmark (a program, not a test): ceilings first (device-to-device copy, an 8192³
// cuBLAS bf16 product), then GEMM on GPT-2 124M shapes, the elementwise kernels of the step
// (bias add, bias-gradient column sum, add, add_, fill_, transpose and cast copies), the FP8 casts
// and amax of --precision fp8 (against their one-element fallbacks), layernorm
// (also fused with the residual add, against the unfused ops) / Llama's rmsnorm (the same) and
// swiglu (against silu and mul) / cross-entropy / AdamW as GB/s against the copy (AdamW also over GPT-2's 148 tensors, per-tensor
// launches against the multi-tensor op), and causal attention fwd+bwd time (compare with
// tests/bench/bench_attention_torch.py, PyTorch SDPA on the same shapes).
// Times are CUDA-event medians of 20 samples after 3 warm-ups, on random inputs (never zeros); a
// sample of a short op times back-to-back calls (see time_ms).
// Shapes are issue 3's: B·T = 16384 tokens, C = 768, V = 50304 (padded; 50257 shown too), and
// attention B=16, 12 heads, T=1024, D=64 in f16 (bf16 and f32 too).
// Usage: bench_ops_cuda [B=16] [T=1024] [sections=all]
//   sections: a comma list of ceil, gemm, fp8gemm, elem, fp8, layernorm, llama, ce, adamw, attn (the copy ceiling
//   always runs: the GB/s rows are shown against it)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "ops/activation.h"
#include "ops/add_layernorm.h"
#include "ops/add_rmsnorm.h"
#include "ops/attention.h"
#include "ops/cuda/sdpa_cudnn.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/fp8_matmul.h"
#include "ops/fp8_quantize.h"
#include "ops/matmul.h"
#include "ops/layernorm.h"
#include "ops/optim.h"
#include "ops/reduce.h"
#include "ops/rmsnorm.h"
#include "ops/swiglu.h"
#include "tensor/autograd.h"
#include "tensor/cuda/runtime.h"
#include "tensor/rng.h"

using namespace st;

namespace {

Generator g_gen(2026);

Tensor rnd(const Shape& s, DType dt, float lo = -1.f, float hi = 1.f) {
  Tensor t = Tensor::empty(s, dt, Device::cuda);
  fill_uniform(t, g_gen, lo, hi);
  return t;
}

// Median milliseconds per call of fn over `reps` samples (events on the current stream). A sample
// times `inner` back-to-back calls, as kernels run inside a training step, with inner chosen so a
// sample lasts ≥ ~0.5 ms: a lone short launch would otherwise be timed with its ~5 µs of launch
// latency (a 15 µs layernorm measured 22 µs alone).
double time_ms(const std::function<void()>& fn, int reps = 20, int warm = 3) {
  for (int i = 0; i < warm; ++i) fn();
  cudaStream_t s = cuda::current_stream();
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  auto sample = [&](int inner) {
    CHECK_CUDA(cudaEventRecord(a, s));
    for (int i = 0; i < inner; ++i) fn();
    CHECK_CUDA(cudaEventRecord(b, s));
    CHECK_CUDA(cudaEventSynchronize(b));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
    return static_cast<double>(t) / inner;
  };
  const double once = sample(1);
  const int inner = once >= 0.5 ? 1 : std::min(100, static_cast<int>(0.5 / std::max(once, 1e-3)) + 1);
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) ms.push_back(sample(inner));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void gemm_row(const char* name, int64_t M, int64_t N, int64_t K, bool tb, DType dt, bool tf32 = false) {
  Tensor a = rnd({M, K}, dt), b = tb ? rnd({N, K}, dt) : rnd({K, N}, dt), c = Tensor::empty({M, N}, dt, Device::cuda);
  ops::cuda::set_gemm_allow_tf32(tf32);
  double ms = time_ms([&] { ops::cuda::gemm(a, b, c, false, tb, 1, M, N, K, false); });
  ops::cuda::set_gemm_allow_tf32(false);
  std::printf("gemm  %-22s %-5s%s M=%-6ld N=%-6ld K=%-5ld %8.3f ms %8.1f TFLOP/s\n", name, dtype_name(dt),
              tf32 ? "+tf32" : "     ", (long)M, (long)N, (long)K, ms, 2.0 * M * N * K / ms / 1e9);
}

// One product of a block's linear layer, as fp8_linear runs it (ops/fp8_linear.h): c (M, N) =
// a (M, K) · b (N, K)ᵀ in FP8 (formats fa, fb) with promoted and with
// fast accumulation, against the bf16 GEMM of the same shape; returns the three times (ms).
struct GemmTimes {
  double bf16 = 0, promoted = 0, fast = 0;
};
GemmTimes fp8_gemm_row(const char* name, int64_t M, int64_t N, int64_t K, ops::Fp8Format fa, ops::Fp8Format fb) {
  Tensor a16 = rnd({M, K}, DType::bf16), b16 = rnd({N, K}, DType::bf16);
  Tensor c = Tensor::empty({M, N}, DType::bf16, Device::cuda);
  ops::Fp8ScalingOptions oa, ob;
  oa.format = fa;
  ob.format = fb;
  ops::Fp8Scaling sa = ops::fp8_scaling(oa, Device::cuda), sb = ops::fp8_scaling(ob, Device::cuda);
  const ops::Fp8Tensor qa = ops::fp8_quantize(a16, sa), qb = ops::fp8_quantize(b16, sb);
  const float *xa = qa.scale_inv.data<float>(), *xb = qb.scale_inv.data<float>();
  GemmTimes t;
  t.bf16 = time_ms([&] { ops::cuda::gemm(a16, b16, c, false, true, 1, M, N, K, false); });
  t.promoted = time_ms([&] { ops::cuda::fp8_gemm(qa.data, xa, qb.data, xb, c); });
  t.fast = time_ms([&] { ops::cuda::fp8_gemm(qa.data, xa, qb.data, xb, c, Tensor(), ops::Fp8Accum::fast); });
  const double tf = 2.0 * M * N * K / 1e9;
  std::printf("fp8g  %-16s M=%-6ld N=%-6ld K=%-6ld bf16 %7.3f ms %6.0f | fp8 %7.3f ms %6.0f | fast %7.3f ms %6.0f TFLOP/s\n",
              name, (long)M, (long)N, (long)K, t.bf16, tf / t.bf16, t.promoted, tf / t.promoted, t.fast, tf / t.fast);
  return t;
}

// A block's twelve products (forward, dgrad, wgrad of qkv, o, up, down) at M tokens, width C,
// qkv width Q, MLP width U (up's output: 4C; SwiGLU's gate|up 2F) and D (down's input: U or F);
// the sums say how much faster the block's GEMMs can get in FP8 (fast accumulation: forward only).
void fp8_block_rows(const char* model, int64_t M, int64_t C, int64_t Q, int64_t U, int64_t D) {
  struct P {
    const char* name;
    int64_t in, out;
  } ps[] = {{"qkv", C, Q}, {"o", C, C}, {"up", C, U}, {"down", D, C}};
  // the training recipe casts gradients to E4M3 too (runtime/optim/mixed_precision.h)
  constexpr ops::Fp8Format E4 = ops::Fp8Format::e4m3, E5 = ops::Fp8Format::e4m3;
  GemmTimes sum;
  double fast_fwd = 0;  // forward fast, gradients promoted: what --precision fp8 runs
  char name[48];
  for (const P& p : ps) {
    std::snprintf(name, sizeof name, "%s fwd", p.name);
    GemmTimes f = fp8_gemm_row(name, M, p.out, p.in, E4, E4);  // x (M, in) · wᵀ
    std::snprintf(name, sizeof name, "%s dgrad", p.name);
    GemmTimes d = fp8_gemm_row(name, M, p.in, p.out, E5, E4);  // g (M, out) · w
    std::snprintf(name, sizeof name, "%s wgrad", p.name);
    GemmTimes w = fp8_gemm_row(name, p.in, p.out, M, E4, E5);  // xᵀ (in, M) · gᵀ
    for (const GemmTimes* t : {&f, &d, &w}) {
      sum.bf16 += t->bf16;
      sum.promoted += t->promoted;
      sum.fast += t->fast;
    }
    fast_fwd += f.fast + d.promoted + w.promoted;
  }
  std::printf("fp8g  %s block: bf16 %.3f ms, fp8 promoted %.3f ms (%.2fx), fast forward %.3f ms (%.2fx), all fast %.3f ms (%.2fx)\n",
              model, sum.bf16, sum.promoted, sum.bf16 / sum.promoted, fast_fwd, sum.bf16 / fast_fwd, sum.fast,
              sum.bf16 / sum.fast);
}

void bw_row(const char* name, double bytes, double ms, double copy_gbs) {
  const double gbs = bytes / ms / 1e6;
  std::printf("mem   %-40s %8.3f ms %8.1f GB/s  (%.0f%% of copy)\n", name, ms, gbs, 100.0 * gbs / copy_gbs);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t B = argc > 1 ? std::atol(argv[1]) : 16, T = argc > 2 ? std::atol(argv[2]) : 1024;
  const int64_t C = 768, V = 50304, BT = B * T, H = 12, D = 64;
  std::string only(",");  // ",a,b," of the sections asked for
  only.append(argc > 3 ? argv[3] : "all").push_back(',');
  auto want = [&](const char* section) {
    std::string key(",");
    key.append(section).push_back(',');
    return only == ",all," || only.find(key) != std::string::npos;
  };
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, cuda::current_device()));
  std::printf("device %s, %d SMs; GPT-2 124M shapes B=%ld T=%ld\n", prop.name, prop.multiProcessorCount, (long)B,
              (long)T);

  // ---- ceilings
  const int64_t copy_n = int64_t{1} << 30;  // 1 GiB each way
  Tensor src = rnd({copy_n / 4}, DType::f32), dst = Tensor::empty({copy_n / 4}, DType::f32, Device::cuda);
  double copy_ms = time_ms([&] { dst.copy_(src); });
  const double copy_gbs = 2.0 * copy_n / copy_ms / 1e6;
  std::printf("ceil  device-to-device copy 1 GiB        %8.3f ms %8.1f GB/s (read + write)\n", copy_ms, copy_gbs);
  src = Tensor();
  dst = Tensor();
  if (want("ceil")) gemm_row("cuBLAS 8192^3", 8192, 8192, 8192, false, DType::bf16);

  // ---- GEMM on GPT-2 124M shapes (forward products; backward has the same shapes transposed)
  for (DType dt : {DType::bf16, DType::f32}) {
    if (!want("gemm")) break;
    for (bool tf32 : {false, true}) {
      if (tf32 && dt != DType::f32) continue;
      gemm_row("attn qkv", BT, 3 * C, C, false, dt, tf32);
      gemm_row("attn proj", BT, C, C, false, dt, tf32);
      gemm_row("mlp fc", BT, 4 * C, C, false, dt, tf32);
      gemm_row("mlp proj", BT, C, 4 * C, false, dt, tf32);
      gemm_row("lm head (tied wte^T)", BT, V, C, true, dt, tf32);
      gemm_row("lm head, V=50257", BT, 50257, C, true, dt, tf32);
    }
  }

  // ---- FP8 GEMMs of a block (ops/fp8_linear.h's three products per linear) against bf16: GPT-2
  // 124M at B·T tokens, and Llama-3.2-1B's block (C 2048, 8 kv heads of 64, F 8192) at B 4 · T 2048
  if (want("fp8gemm")) {
    fp8_block_rows("gpt2", BT, C, 3 * C, 4 * C, 4 * C);
    fp8_block_rows("llama-1b", 4 * 2048, 2048, 2048 + 2 * 512, 2 * 8192, 8192);
  }

  // ---- elementwise and tensor-core kernels of the training step (f16, as profiled)
  if (want("elem")) {
    const DType dt = DType::f16;
    const double es = static_cast<double>(dtype_size(dt));
    Tensor x = rnd({BT, 4 * C}, dt), bias = rnd({4 * C}, dt), y = x.empty_like();
    Tensor be = ops::expand(bias, {BT, 4 * C}), col = Tensor::empty({1, 4 * C}, dt, Device::cuda);
    const double n4 = static_cast<double>(BT * 4 * C), n1 = static_cast<double>(BT * C);
    bw_row("bias add (BT,3072)+(3072) f16", 2 * n4 * es,
           time_ms([&] { ops::cuda::binary_fwd(ops::BinaryOp::add, x, be, y); }), copy_gbs);
    bw_row("bias grad sum dim 0 (BT,3072) f16", n4 * es, time_ms([&] { ops::cuda::sum_fwd(x, col); }), copy_gbs);
    Tensor dh = rnd({BT, 4 * C}, dt), dpre = x.empty_like(), db = Tensor::empty({4 * C}, dt, Device::cuda);
    bw_row("gelu grad, then its column sum (BT,3072) f16", 4 * n4 * es, time_ms([&] {
             ops::cuda::gelu_bwd(x, dh, dpre);
             ops::cuda::sum_fwd(dpre, col);
           }),
           copy_gbs);
    bw_row("gelu grad summed as computed (BT,3072) f16", 3 * n4 * es,
           time_ms([&] { ops::cuda::gelu_bwd_sum_cols(x, dh, dpre, db); }), copy_gbs);
    Tensor a = rnd({BT, C}, dt), b = rnd({BT, C}, dt), c = a.empty_like();
    bw_row("same-shape add (BT,768) f16", 3 * n1 * es,
           time_ms([&] { ops::cuda::binary_fwd(ops::BinaryOp::add, a, b, c); }), copy_gbs);
    bw_row("add_ (grad accumulate) (BT,768) f16", 3 * n1 * es, time_ms([&] { c.add_(a); }), copy_gbs);
    bw_row("fill_ (BT,3072) f16", n4 * es, time_ms([&] { y.fill_(0.0); }), copy_gbs);
    Tensor q = rnd({B, T, H, D}, dt), qt = Tensor::empty({B, H, T, D}, dt, Device::cuda);
    bw_row("copy (B,T,H,D)->(B,H,T,D) f16", 2 * n1 * es,
           time_ms([&] { qt.copy_(q.permute({0, 2, 1, 3})); }), copy_gbs);
    Tensor q32 = Tensor::empty({B, T, H, D}, DType::f32, Device::cuda);
    bw_row("cast copy f16 -> f32 (BT,768)", n1 * (es + 4), time_ms([&] { q32.copy_(q); }), copy_gbs);
  }

  // ---- FP8 casts (ops/fp8_quantize.h) of bf16 activations at the widths fp8_linear casts (C, 3C,
  // 4C): fp8_amax (x read), the plain cast (x → q), the transposing cast (x → q, qt), and the whole
  // current-scaling quantize of --precision fp8 (zero, amax, scale, transposing cast: x read twice);
  // bytes as each moves them. Peers in the same run: the one-element kernels the launchers fall
  // back to (R = BT − 4 or − 3, not a multiple of 8: the 32 × 32 transposing kernel; a view one
  // element off alignment: the scalar cast). "counting": the same with the overflow / underflow
  // counts' block sums and atomics (the per-element counting runs in every row; against main's
  // rows of the same machine it shows the whole cost of the counts).
  if (want("fp8")) {
    ops::Fp8Scaling sc = ops::fp8_scaling({}, Device::cuda);
    float* state = ops::fp8_state_ptr(sc, "bench_ops_cuda");
    Tensor si = Tensor::empty({1}, DType::f32, Device::cuda), none;
    Tensor counts = Tensor::zeros({2}, DType::i64, Device::cuda);  // (2) [overflow, underflow]
    int64_t* cnt = counts.data<int64_t>();
    for (int64_t Cx : {C, 3 * C, 4 * C}) {
      const int64_t R = BT, Rr = BT - (BT % 8 == 4 ? 3 : 4);  // Rr % 8 ≠ 0
      Tensor x = rnd({R, Cx}, DType::bf16), q = Tensor::empty({R, Cx}, DType::f8e4m3, Device::cuda);
      Tensor qt = Tensor::empty({Cx, R}, DType::f8e4m3, Device::cuda);
      const double n = static_cast<double>(R * Cx), nr = static_cast<double>(Rr * Cx);
      char name[80];
      std::snprintf(name, sizeof name, "fp8 amax (BT,%ld) bf16 (x)", (long)Cx);
      bw_row(name, 2 * n, time_ms([&] { ops::cuda::fp8_amax(x, state + ops::kFp8Amax); }), copy_gbs);
      std::snprintf(name, sizeof name, "fp8 cast (BT,%ld) bf16 (x, q)", (long)Cx);
      bw_row(name, 3 * n, time_ms([&] { ops::cuda::fp8_cast(x, q, none, state, true, si.data<float>()); }),
             copy_gbs);
      bw_row("  the same, counting", 3 * n,
             time_ms([&] { ops::cuda::fp8_cast(x, q, none, state, true, si.data<float>(), cnt); }), copy_gbs);
      Tensor xm = x.view({R * Cx}).narrow(0, 1, R * Cx - 1).view({1, R * Cx - 1});
      Tensor qm = Tensor::empty({1, R * Cx - 1}, DType::f8e4m3, Device::cuda);
      bw_row("  the same, x misaligned (one element a thread)", 3 * n,
             time_ms([&] { ops::cuda::fp8_cast(xm, qm, none, state, true, si.data<float>()); }), copy_gbs);
      std::snprintf(name, sizeof name, "fp8 cast+transpose (BT,%ld) bf16 (x, q, qt)", (long)Cx);
      bw_row(name, 4 * n, time_ms([&] { ops::cuda::fp8_cast(x, q, qt, state, true, si.data<float>()); }), copy_gbs);
      bw_row("  the same, counting", 4 * n,
             time_ms([&] { ops::cuda::fp8_cast(x, q, qt, state, true, si.data<float>(), cnt); }), copy_gbs);
      Tensor xr = x.narrow(0, 0, Rr), qr = Tensor::empty({Rr, Cx}, DType::f8e4m3, Device::cuda);
      Tensor qtr = Tensor::empty({Cx, Rr}, DType::f8e4m3, Device::cuda);
      bw_row("  the same, R % 8 != 0 (32x32 one-element kernel)", 4 * nr,
             time_ms([&] { ops::cuda::fp8_cast(xr, qr, qtr, state, true, si.data<float>()); }), copy_gbs);
      std::snprintf(name, sizeof name, "fp8 quantize, current, transposed (BT,%ld)", (long)Cx);
      bw_row(name, 6 * n, time_ms([&] { ops::fp8_quantize(x, sc, true); }), copy_gbs);
      bw_row("  the same, counting (what --precision fp8 runs)", 6 * n,
             time_ms([&] { ops::fp8_quantize(x, sc, true, counts); }), copy_gbs);
    }
  }

  // ---- layernorm (BT, C)
  for (DType dt : {DType::bf16, DType::f32}) {
    if (!want("layernorm")) break;
    Tensor x = rnd({BT, C}, dt), w = rnd({C}, dt), b = rnd({C}, dt), y = x.empty_like();
    Tensor mean = Tensor::empty({BT}, DType::f32, Device::cuda), rstd = mean.empty_like();
    Tensor dy = rnd({BT, C}, dt), dx = x.empty_like(), dw = w.empty_like(), db = w.empty_like();
    const double es = static_cast<double>(dtype_size(dt)), n = static_cast<double>(BT * C);
    double f = time_ms([&] { ops::cuda::layernorm_fwd(x, w, b, 1e-5f, y, mean, rstd); });
    double bw = time_ms([&] { ops::cuda::layernorm_bwd(x, w, mean, rstd, dy, dx, dw, db); });
    char name[64];
    std::snprintf(name, sizeof name, "layernorm fwd %s (x, y)", dtype_name(dt));
    bw_row(name, 2 * n * es, f, copy_gbs);
    std::snprintf(name, sizeof name, "layernorm bwd %s (x, dy, dx)", dtype_name(dt));
    bw_row(name, 3 * n * es, bw, copy_gbs);
    // the residual add fused in (ops/add_layernorm.h) against the unfused ops it replaces, bytes
    // counted as the fused op moves them (x, a → r, y; r, dy, dr → dx)
    Tensor a = rnd({BT, C}, dt), r = x.empty_like(), dr = rnd({BT, C}, dt), none;
    const ops::ResidualDropout nodrop;
    f = time_ms([&] { ops::cuda::add_layernorm_fwd(x, a, nodrop, w, b, 1e-5f, r, y, mean, rstd); });
    double uf = time_ms([&] {
      ops::cuda::binary_fwd(ops::BinaryOp::add, x, a, r);
      ops::cuda::layernorm_fwd(r, w, b, 1e-5f, y, mean, rstd);
    });
    bw = time_ms([&] { ops::cuda::add_layernorm_bwd(r, w, mean, rstd, dy, dr, nodrop, dx, none, dw, db); });
    double ub = time_ms([&] {
      ops::cuda::layernorm_bwd(r, w, mean, rstd, dy, dx, dw, db);
      Tensor sum = dr.clone();  // autograd's sum of r's two gradients
      sum.add_(dx);
    });
    std::snprintf(name, sizeof name, "add + layernorm fwd %s fused (x, a, r, y)", dtype_name(dt));
    bw_row(name, 4 * n * es, f, copy_gbs);
    std::snprintf(name, sizeof name, "  the same unfused (add, layernorm)");
    bw_row(name, 4 * n * es, uf, copy_gbs);
    std::snprintf(name, sizeof name, "layernorm bwd + dr %s fused (r, dy, dr, dx)", dtype_name(dt));
    bw_row(name, 4 * n * es, bw, copy_gbs);
    std::snprintf(name, sizeof name, "  the same unfused (layernorm bwd, copy, add_)");
    bw_row(name, 4 * n * es, ub, copy_gbs);
  }

  // ---- Llama's norm and gated activation at Llama 2 7B's widths: rmsnorm (BT, 4096), also with
  // the residual add against the unfused ops; swiglu (BT, 2·11008) → (BT, 11008) against the
  // unfused silu of the gate half and its product with the up half (as a model would call them)
  for (DType dt : {DType::bf16, DType::f32}) {
    if (!want("llama")) break;
    const int64_t Cl = 4096, Fl = 11008;
    Tensor x = rnd({BT, Cl}, dt), a = rnd({BT, Cl}, dt), w = rnd({Cl}, dt), y = x.empty_like(), r = x.empty_like();
    Tensor rstd = Tensor::empty({BT}, DType::f32, Device::cuda);
    Tensor dy = rnd({BT, Cl}, dt), dr = rnd({BT, Cl}, dt), dx = x.empty_like(), dw = w.empty_like();
    const double es = static_cast<double>(dtype_size(dt)), n = static_cast<double>(BT * Cl);
    char name[64];
    std::snprintf(name, sizeof name, "rmsnorm fwd %s (x, y) C=4096", dtype_name(dt));
    bw_row(name, 2 * n * es, time_ms([&] { ops::cuda::rmsnorm_fwd(x, w, 1e-6f, y, rstd); }), copy_gbs);
    std::snprintf(name, sizeof name, "rmsnorm bwd %s (x, dy, dx)", dtype_name(dt));
    bw_row(name, 3 * n * es, time_ms([&] { ops::cuda::rmsnorm_bwd(x, w, rstd, dy, dx, dw); }), copy_gbs);
    std::snprintf(name, sizeof name, "add + rmsnorm fwd %s fused (x, a, r, y)", dtype_name(dt));
    bw_row(name, 4 * n * es, time_ms([&] { ops::cuda::add_rmsnorm_fwd(x, a, w, 1e-6f, r, y, rstd); }), copy_gbs);
    bw_row("  the same unfused (add, rmsnorm)", 4 * n * es, time_ms([&] {
             ops::cuda::binary_fwd(ops::BinaryOp::add, x, a, r);
             ops::cuda::rmsnorm_fwd(r, w, 1e-6f, y, rstd);
           }), copy_gbs);
    std::snprintf(name, sizeof name, "rmsnorm bwd + dr %s fused (r, dy, dr, dx)", dtype_name(dt));
    bw_row(name, 4 * n * es, time_ms([&] { ops::cuda::add_rmsnorm_bwd(r, w, rstd, dy, dr, dx, dw); }), copy_gbs);
    bw_row("  the same unfused (rmsnorm bwd, copy, add_)", 4 * n * es, time_ms([&] {
             ops::cuda::rmsnorm_bwd(r, w, rstd, dy, dx, dw);
             Tensor sum = dr.clone();  // autograd's sum of r's two gradients
             sum.add_(dx);
           }), copy_gbs);
    x = a = y = r = dy = dr = dx = Tensor();
    Tensor gu = rnd({BT, 2 * Fl}, dt, -4.f, 4.f), ys = Tensor::empty({BT, Fl}, dt, Device::cuda);
    Tensor dys = rnd({BT, Fl}, dt), dgu = gu.empty_like();
    const double nf = static_cast<double>(BT * Fl);
    std::snprintf(name, sizeof name, "swiglu fwd %s (gu, y) F=11008", dtype_name(dt));
    bw_row(name, 3 * nf * es, time_ms([&] { ops::cuda::swiglu_fwd(gu, ys); }), copy_gbs);
    bw_row("  the same unfused (silu of the gate, mul)", 3 * nf * es, time_ms([&] {
             NoGradGuard ng;
             ops::mul(ops::silu(gu.narrow(1, 0, Fl)), gu.narrow(1, Fl, Fl));
           }), copy_gbs);
    std::snprintf(name, sizeof name, "swiglu bwd %s (gu, dy, dgu)", dtype_name(dt));
    bw_row(name, 5 * nf * es, time_ms([&] { ops::cuda::swiglu_bwd(gu, dys, dgu); }), copy_gbs);
  }

  // ---- fused cross-entropy (BT, V)
  for (DType dt : {DType::bf16, DType::f32}) {
    if (!want("ce")) break;
    Tensor logits = rnd({BT, V}, dt, -3.f, 3.f);
    std::vector<int64_t> tv(static_cast<size_t>(BT));
    for (int64_t i = 0; i < BT; ++i) tv[i] = (i * 7919) % V;
    Tensor targets = Tensor::from_vector(tv, {BT}, Device::cuda);
    Tensor loss = Tensor::empty({}, DType::f32, Device::cuda), cnt = loss.empty_like(), dloss = Tensor::ones({}, DType::f32, Device::cuda);
    Tensor lse = Tensor::empty({BT}, DType::f32, Device::cuda), dlogits = logits.empty_like();
    const double n = static_cast<double>(BT * V) * dtype_size(dt);
    double f = time_ms([&] { ops::cuda::cross_entropy_fwd(logits, targets, -100, loss, lse, cnt); }, 10);
    double bw = time_ms([&] { ops::cuda::cross_entropy_bwd(logits, targets, lse, cnt, dloss, -100, dlogits); }, 10);
    char name[64];
    std::snprintf(name, sizeof name, "cross-entropy fwd %s (logits)", dtype_name(dt));
    bw_row(name, n, f, copy_gbs);
    std::snprintf(name, sizeof name, "cross-entropy bwd %s (logits, dlogits)", dtype_name(dt));
    bw_row(name, 2 * n, bw, copy_gbs);
  }

  // ---- AdamW over 124M parameters (f32 master, m, v, f32 grad, bf16 copy)
  if (want("adamw")) {
    const int64_t P = 124439808;
    Tensor p = rnd({P}, DType::f32), g = rnd({P}, DType::f32), m = rnd({P}, DType::f32, -0.01f, 0.01f),
           v = rnd({P}, DType::f32, 0.f, 1e-4f), lp = Tensor::empty({P}, DType::bf16, Device::cuda);
    ops::AdamWScalars s = ops::adamw_scalars({6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f}, 10);
    double ms = time_ms([&] { ops::cuda::adamw_step(p, g, m, v, s, lp); });
    bw_row("adamw 124M (p g m v read, p m v lp write)", static_cast<double>(P) * (4 * 4 + 3 * 4 + 2), ms, copy_gbs);
    double n2 = time_ms([&] { ops::cuda::sum_squares(g); });
    bw_row("sum_squares 124M f32 (incl. host sync)", static_cast<double>(P) * 4, n2, copy_gbs);
  }
  // ---- the same over GPT-2's 148 tensors: one launch per tensor vs the multi-tensor chunk table
  if (want("adamw")) {
    const int64_t C = 768, L = 12;
    std::vector<Shape> shapes{{50304, C}, {1024, C}};  // wte (padded), wpe
    for (int64_t l = 0; l < L; ++l)
      for (const Shape& s : std::vector<Shape>{{C}, {C}, {C, 3 * C}, {3 * C}, {C, C}, {C}, {C}, {C}, {C, 4 * C},
                                               {4 * C}, {4 * C, C}, {C}})
        shapes.push_back(s);  // ln1 w b, qkv w b, proj w b, ln2 w b, fc w b, fc2 w b
    shapes.push_back({C}), shapes.push_back({C});  // lnf w b
    const size_t N = shapes.size();
    std::vector<Tensor> p(N), g(N), m(N), v(N), lp(N);
    int64_t P = 0;
    for (size_t i = 0; i < N; ++i) {
      p[i] = rnd(shapes[i], DType::f32), g[i] = rnd(shapes[i], DType::f32);
      m[i] = rnd(shapes[i], DType::f32, -0.01f, 0.01f), v[i] = rnd(shapes[i], DType::f32, 0.f, 1e-4f);
      lp[i] = Tensor::empty(shapes[i], DType::bf16, Device::cuda);
      P += p[i].numel();
    }
    const ops::AdamWScalars sw = ops::adamw_scalars({6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f}, 10);
    const ops::AdamWScalars s0 = ops::adamw_scalars({6e-4f, 0.9f, 0.95f, 1e-8f, 0.f}, 10);
    std::vector<ops::AdamWSlot> slots;
    for (size_t i = 0; i < N; ++i) slots.push_back({&p[i], &g[i], &m[i], &v[i], lp[i], p[i].dim() >= 2 ? sw : s0, Tensor()});
    const double bytes = static_cast<double>(P) * (4 * 4 + 3 * 4 + 2);
    double loop = time_ms([&] {
      for (size_t i = 0; i < N; ++i) ops::cuda::adamw_step(p[i], g[i], m[i], v[i], slots[i].s, lp[i]);
    });
    double multi = time_ms([&] { ops::cuda::adamw_step_multi(slots); });
    char name[96];
    std::snprintf(name, sizeof name, "adamw GPT-2 %zu tensors, one launch each", N);
    bw_row(name, bytes, loop, copy_gbs);
    std::snprintf(name, sizeof name, "adamw GPT-2 %zu tensors, multi-tensor", N);
    bw_row(name, bytes, multi, copy_gbs);
  }

  // ---- causal attention (B, H, T, D), the GPT's packed (B, T, 3·H·D) form and the Llama form
  // (packed, H/4 key/value heads, rotary embedding fused into the kernels' loads), each backend
  for (DType dt : {DType::f16, DType::bf16, DType::f32}) {
    if (!want("attn")) break;
    Tensor q = rnd({B, H, T, D}, dt), k = rnd({B, H, T, D}, dt), v = rnd({B, H, T, D}, dt), o = q.empty_like();
    Tensor lse = Tensor::empty({B, H, T}, DType::f32, Device::cuda);
    Tensor dO = rnd({B, H, T, D}, dt), dq = q.empty_like(), dk = q.empty_like(), dv = q.empty_like();
    Tensor qkv = rnd({B, T, 3 * H * D}, dt), out = rnd({B, T, H * D}, dt), dout = rnd({B, T, H * D}, dt),
           dqkv = qkv.empty_like();
    const int64_t Hkv = H / 4;
    Tensor qkv_g = rnd({B, T, (H + 2 * Hkv) * D}, dt), dqkv_g = qkv_g.empty_like();
    ops::RopeConfig rc;
    rc.theta = 500000.0;
    rc.head_dim = D;
    rc.llama3 = true;
    const ops::RopeTable rope(rc, T);
    const double flops_f = 2.0 * B * H * T * T * D;  // causal: half of 4·B·H·T²·D
    using ops::cuda::AttentionBackend;
    for (AttentionBackend backend : {AttentionBackend::Flash, AttentionBackend::Fast, AttentionBackend::Deterministic}) {
      if (dt == DType::f32 && backend != AttentionBackend::Flash) break;  // f32 has one path
      ops::cuda::set_attention_backend(backend);
      for (int form : {0, 1, 2}) {  // 4-d, packed, packed GQA + rope
        const bool packed = form > 0;
        if (packed && dt == DType::f32) break;  // the packed launchers are the f16/bf16 kernels'
        auto fwd = [&] {
          if (form == 0) ops::cuda::attention_fwd(q, k, v, o, lse);
          if (form == 1) ops::cuda::attention_qkv_fwd(qkv, out, lse, H, H, nullptr, 0);
          if (form == 2) ops::cuda::attention_qkv_fwd(qkv_g, out, lse, H, Hkv, &rope, 0);
        };
        auto bwd = [&] {
          if (form == 0) ops::cuda::attention_bwd(q, k, v, o, lse, dO, dq, dk, dv);
          if (form == 1) ops::cuda::attention_qkv_bwd(qkv, out, lse, dout, dqkv, H, H, nullptr, 0);
          if (form == 2) ops::cuda::attention_qkv_bwd(qkv_g, out, lse, dout, dqkv_g, H, Hkv, &rope, 0);
        };
        const double f = time_ms(fwd, 10), bw = time_ms(bwd, 10);
        const int64_t calls = ops::cuda::cudnn_sdpa_calls();
        fwd();
        bwd();
        const bool cudnn = ops::cuda::cudnn_sdpa_calls() == calls + 2;  // both directions ran on cuDNN
        const char* name = dt == DType::f32                             ? "CUDA cores"
                           : backend == AttentionBackend::Flash         ? "flash"
                           : !cudnn                                     ? "(cuDNN declined) flash"
                           : backend == AttentionBackend::Deterministic ? "cuDNN-det"
                                                                        : "cuDNN";
        std::printf("attn  causal %s %-10s %-8s B=%ld H=%ld T=%ld D=%ld  fwd %8.3f ms (%6.1f TFLOP/s)  bwd %8.3f ms "
                    "(%6.1f TFLOP/s)  fwd+bwd %8.3f ms\n",
                    dtype_name(dt), name, form == 0 ? "4-d" : form == 1 ? "packed" : "gqa+rope", (long)B, (long)H, (long)T, (long)D, f,
                    flops_f / f / 1e9, bw, 2.5 * flops_f / bw / 1e9, f + bw);
      }
    }
    ops::cuda::set_attention_backend(AttentionBackend::Deterministic);
  }
  if (want("attn")) std::printf("attention: %s\n", ops::cuda::cudnn_sdpa_status().c_str());
  std::printf("peak bytes in use %.2f GiB\n", cuda::bytes_peak() / double(1 << 30));
  return 0;
}
