// CUDA fused LM head + cross-entropy (ops/lm_head_loss.h). Per chunk of rows, on the current stream:
//   cuBLAS  x (n, V) = h_c · wᵀ in h's dtype (ops::cuda::gemm, the unfused head's product)
//   kernel  one block per row: one pass for the online max / Σ exp (as ops/cuda/cross_entropy.cu's
//           forward), the row's lse and loss; then a second pass over the same row (just read, so
//           mostly from L2) writing σ·(exp(x − lse) − onehot(t)) over it in place, 0 on ignored rows
//   cuBLAS  dh_c (n, C) f32 = x · w,   dw (V, C) f32 += xᵀ · h_c     (gemm_f32)
// then one small block sums the row losses in double (loss = Σ / count, as the unfused op). An
// out-of-range target is flagged in device memory, its row treated as ignored, and raised as
// ValueError after the last chunk: one host sync per call, the unfused op's price for the same
// contract. The backward's scale (dh, dw × dloss / (count · σ), cast once) reads dloss and count
// from device memory: no host sync.
// Rows whose V is a multiple of 8 and that start 16-byte aligned (GPT-2's padded V = 50304) move
// runs of 8 values per 16-byte access; otherwise runs of single accesses.
#include "ops/cuda/common.cuh"
#include "ops/cuda/softmax_rows.cuh"
#include "ops/lm_head_loss.h"
#include "ops/matmul.h"
#include "tensor/graph.h"

namespace st::ops::cuda {
namespace {

constexpr int kThreads = 512;

// online_merge, load8, store8, block_row_max_sumexp: ops/cuda/softmax_rows.cuh

// x (n, V) one chunk's logits, targets (n); rows r of the chunk are rows row0 + r of the call.
// Writes row_loss, valid (n) (0 on ignored and bad rows), bad[0..1] = (row, target) of the first
// out-of-range target; with `grad`, x ← σ·(softmax(x) − onehot(t)) in place.
template <class T, class I, bool kVec>
__global__ void lm_head_ce_kernel(T* x, const I* targets, int64_t n, int64_t V, int64_t ignore, float sigma,
                                  bool grad, int64_t row0, float* row_loss, float* valid, unsigned long long* bad) {
  __shared__ float sm[32], ss[32];
  __shared__ float s_lse;
  __shared__ int64_t s_t;  // the row's target, or −1: a row of zeros (ignored or bad)
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    T* xr = x + r * V;
    const float2 ms = block_row_max_sumexp<T, kVec>(xr, V, sm, ss);  // (max, Σ exp(x − max)) in thread 0
    if (threadIdx.x == 0) {
      const float M = ms.x, S = ms.y;
      const float ls = logf(S);
      const int64_t t = static_cast<int64_t>(targets[r]);
      float loss = 0.f, ok = 0.f;
      int64_t keep = -1;
      if (t != ignore) {
        if (t < 0 || t >= V) {
          if (atomicCAS(bad, ~0ull, static_cast<unsigned long long>(row0 + r)) == ~0ull)
            bad[1] = static_cast<unsigned long long>(t);
        } else {
          loss = ls - (to_float(xr[t]) - M);
          ok = 1.f;
          keep = t;
        }
      }
      row_loss[r] = loss;
      valid[r] = ok;
      s_lse = M + ls;
      s_t = keep;
    }
    __syncthreads();  // every read of the row is done before it is overwritten
    if (grad) {
      const float l = s_lse;
      const int64_t t = s_t;
      const float on = t >= 0 ? 1.f : 0.f;  // 0: the row's gradient is 0
      if constexpr (kVec) {
        for (int64_t c = threadIdx.x * 8LL; c < V; c += blockDim.x * 8LL) {
          float v[8];
          load8(xr + c, v);
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            v[j] = __expf(v[j] - l) * sigma * on;
            if (c + j == t) v[j] -= sigma;
          }
          store8(xr + c, v);
        }
      } else {  // stride 1 across the block so that the 2-byte stores coalesce
        for (int64_t c = threadIdx.x; c < V; c += blockDim.x) {
          float d = __expf(to_float(xr[c]) - l) * sigma * on;
          if (c == t) d -= sigma;
          xr[c] = from_float<T>(d);
        }
      }
    }
    __syncthreads();  // s_lse / s_t are rewritten by the next row
  }
}

// row_loss, valid (N) → loss () = Σ loss / Σ valid, count () = Σ valid
__global__ void lm_head_mean_kernel(const float* row_loss, const float* valid, int64_t N, float* loss, float* count) {
  __shared__ double scratch[32];
  double a = 0, c = 0;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) {
    a += row_loss[n];
    c += valid[n];
  }
  a = block_sum(a, scratch);
  c = block_sum(c, scratch);
  if (threadIdx.x == 0) {
    *loss = static_cast<float>(a / c);
    *count = static_cast<float>(c);
  }
}

// dst[i] = src[i] · (dloss / count) / σ, 0 when count is 0; dst may be src
template <class T>
__global__ void lm_head_scale_kernel(const float* src, const float* dloss, const float* count, float inv_sigma,
                                     int64_t n, T* dst) {
  const float cnt = *count;
  const float k = (cnt > 0.f ? *dloss / cnt : 0.f) * inv_sigma;  // σ a power of two: exact
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = from_float<T>(src[i] * k);
}

template <class Fn>
void visit_index(const Tensor& t, Fn&& fn) {
  if (t.dtype() == DType::i32)
    fn(int32_t{});
  else if (t.dtype() == DType::i64)
    fn(int64_t{});
  else
    ST_THROW(DTypeError, "lm_head_cross_entropy: targets must be i32/i64, got " << t.describe());
}

// every row starts 16-byte aligned and holds whole runs of 8 (V % 8 == 0)
bool rows_aligned(const Tensor& x) { return x.size(1) % 8 == 0 && st::cuda::aligned16(x.data_ptr()); }

}  // namespace

void lm_head_loss_fwd(const Tensor& h, const Tensor& w, const Tensor& targets, int64_t ignore_index, int64_t rows,
                      float sigma, Tensor& loss, Tensor& count, Tensor* dh, Tensor* dw) {
  check_contiguous_cuda("lm_head_cross_entropy", {&h, &w, &targets, &loss, &count});
  if (dh != nullptr) check_contiguous_cuda("lm_head_cross_entropy", {dh});
  if (dw != nullptr) check_contiguous_cuda("lm_head_cross_entropy", {dw});
  const int64_t N = h.size(0), C = h.size(1), V = w.size(0);
  const bool grad = dh != nullptr || dw != nullptr;
  cudaStream_t stream = current_stream();
  Tensor x = Tensor::empty({std::min(rows, N), V}, h.dtype(), Device::cuda);  // (rows, V): the one chunk buffer
  Tensor row_loss = Tensor::empty({N}, DType::f32, Device::cuda);              // (N)
  Tensor valid = Tensor::empty({N}, DType::f32, Device::cuda);                 // (N)
  Tensor bad = Tensor::full({2}, -1.0, DType::i64, Device::cuda);             // (row, target) or all ones
  if (dw != nullptr && N == 0) dw->fill_(0.0);
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    Tensor xc = x.narrow(0, 0, n), hc = h.narrow(0, r0, n), tc = targets.narrow(0, r0, n);
    gemm(hc, w, xc, false, true, 1, n, V, C, false);  // (n, C)·(V, C)ᵀ
    visit_float_dtype(h.dtype(), "lm_head_cross_entropy", [&](auto tag) {
      using T = decltype(tag);
      visit_index(targets, [&](auto itag) {
        using I = decltype(itag);
        auto kernel = rows_aligned(xc) ? lm_head_ce_kernel<T, I, true> : lm_head_ce_kernel<T, I, false>;
        kernel<<<grid_for(n, 1), kThreads, 0, stream>>>(
            static_cast<T*>(xc.data_ptr()), static_cast<const I*>(tc.data_ptr()), n, V, ignore_index, sigma, grad, r0,
            row_loss.data<float>() + r0, valid.data<float>() + r0, static_cast<unsigned long long*>(bad.data_ptr()));
        CHECK_LAUNCH();
      });
    });
    if (dh != nullptr) {
      Tensor dhc = dh->narrow(0, r0, n);
      gemm_f32(xc, w, dhc, false, false, n, C, V, false);  // (n, V)·(V, C)
    }
    if (dw != nullptr) gemm_f32(xc, hc, *dw, true, false, V, C, n, /*accumulate=*/r0 > 0);  // (n, V)ᵀ·(n, C)
  }
  lm_head_mean_kernel<<<1, 1024, 0, stream>>>(row_loss.data<float>(), valid.data<float>(), N, loss.data<float>(),
                                              count.data<float>());
  CHECK_LAUNCH();
  // read now (synchronises the stream), or after each replay inside a CUDA graph (tensor/graph.h)
  check_on_host(bad, [V, ignore_index](const std::vector<int64_t>& b) {
    if (b[0] >= 0)
      ST_THROW(ValueError, "lm_head_cross_entropy: target " << b[1] << " at position " << b[0]
                                                            << " is outside [0, V = " << V << ") and is not ignore_index "
                                                            << ignore_index);
  });
}

void lm_head_loss_scale(const Tensor& src, const Tensor& dloss, const Tensor& count, float sigma, Tensor& dst) {
  check_contiguous_cuda("lm_head_cross_entropy", {&src, &dloss, &count, &dst});
  const int64_t n = src.numel();
  if (n == 0) return;
  visit_float_dtype(dst.dtype(), "lm_head_cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    lm_head_scale_kernel<T><<<grid_for(n, 256), 256, 0, current_stream()>>>(
        src.data<float>(), dloss.data<float>(), count.data<float>(), 1.f / sigma, n, static_cast<T*>(dst.data_ptr()));
    CHECK_LAUNCH();
  });
}

}  // namespace st::ops::cuda
