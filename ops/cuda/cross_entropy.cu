// CUDA fused softmax + cross-entropy. The logits (N, V) are read in their own dtype, never
// copied to f32:
//   fwd: one block per row, one pass with an online max / Σ exp per thread (merged across the
//        block), lse (N) f32 and the row loss; then one small block sums the counted rows in
//        double and writes loss () = total / count and count (). An out-of-range target is
//        flagged in device memory and raised as ValueError after the kernels (this one host
//        sync is the contract's price for the named error).
//   bwd: one pass per row, dlogits = (exp(x − lse) − onehot(t)) · dloss / count, written (=);
//        dloss and count are read from device memory, so no host sync.
// When V % 8 == 0 and the rows are 16-byte aligned (GPT-2's padded V = 50304), both move runs of 8
// values with 16-byte loads and stores; otherwise runs of 2-byte accesses.
#include "ops/cross_entropy.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/softmax_rows.cuh"
#include "tensor/graph.h"

namespace st::ops::cuda {
namespace {

constexpr int kThreads = 512;

// online_merge, load8, store8, block_row_max_sumexp: ops/cuda/softmax_rows.cuh

// kernels

// logits (N, V), targets (N) → lse (N), row_loss (N) (NaN-free; 0 on ignored rows), valid (N),
// bad[0..1] = (row, target) of the first out-of-range target
template <class T, class I, bool kVec>
__global__ void cross_entropy_fwd_kernel(const T* logits, const I* targets, int64_t N, int64_t V, int64_t ignore,
                                         float* lse, float* row_loss, float* valid, unsigned long long* bad) {
  __shared__ float sm[32], ss[32];
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* xr = logits + n * V;
    const float2 ms = block_row_max_sumexp<T, kVec>(xr, V, sm, ss);  // (max, Σ exp(x − max)) in thread 0
    if (threadIdx.x == 0) {
      const float M = ms.x, S = ms.y;
      const float ls = logf(S);
      lse[n] = M + ls;
      const int64_t t = static_cast<int64_t>(targets[n]);
      float loss = 0.f, ok = 0.f;
      if (t != ignore) {
        if (t < 0 || t >= V) {
          if (atomicCAS(bad, ~0ull, static_cast<unsigned long long>(n)) == ~0ull)
            bad[1] = static_cast<unsigned long long>(t);
        } else {
          loss = ls - (to_float(xr[t]) - M);
          ok = 1.f;
        }
      }
      row_loss[n] = loss;
      valid[n] = ok;
    }
    __syncthreads();
  }
}

// row_loss, valid (N) → loss () = Σ loss / Σ valid, count () = Σ valid
__global__ void cross_entropy_mean_kernel(const float* row_loss, const float* valid, int64_t N, float* loss,
                                          float* count) {
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

// logits, dlogits (N, V); lse (N); count, dloss () on the device
template <class T, class I, bool kVec>
__global__ void cross_entropy_bwd_kernel(const T* logits, const I* targets, const float* lse, const float* count,
                                         const float* dloss, int64_t N, int64_t V, int64_t ignore, T* dlogits) {
  const float cnt = *count;
  const float k = cnt > 0.f ? *dloss / cnt : 0.f;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* xr = logits + n * V;
    T* dr = dlogits + n * V;
    const int64_t t = static_cast<int64_t>(targets[n]);
    const float l = lse[n];
    if (t == ignore) {
      for (int64_t c = threadIdx.x; c < V; c += blockDim.x) dr[c] = from_float<T>(0.f);
      continue;
    }
    if constexpr (kVec) {  // runs of 8: one 16-byte load and one 16-byte store per thread
      for (int64_t c = threadIdx.x * 8LL; c < V; c += blockDim.x * 8LL) {
        float x[8];
        load8(xr + c, x);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          x[j] = __expf(x[j] - l) * k;
          if (c + j == t) x[j] -= k;
        }
        store8(dr + c, x);
      }
    } else {  // stride 1 across the block so that the 2-byte stores coalesce
      for (int64_t c = threadIdx.x; c < V; c += blockDim.x) {
        float d = __expf(to_float(xr[c]) - l) * k;
        if (c == t) d -= k;
        dr[c] = from_float<T>(d);
      }
    }
  }
}

template <class Fn>
void visit_index(const Tensor& t, Fn&& fn) {
  if (t.dtype() == DType::i32)
    fn(int32_t{});
  else if (t.dtype() == DType::i64)
    fn(int64_t{});
  else
    ST_THROW(DTypeError, "cross_entropy: targets must be i32/i64, got " << t.describe());
}

// every row starts 16-byte aligned and holds whole runs of 8 (V % 8 == 0)
bool rows_aligned(const Tensor& x) { return x.size(1) % 8 == 0 && st::cuda::aligned16(x.data_ptr()); }

}  // namespace

// launchers

void cross_entropy_fwd(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Tensor& loss, Tensor& lse,
                       Tensor& count) {
  check_contiguous_cuda("cross_entropy", {&logits, &targets, &loss, &lse, &count});
  const int64_t N = logits.size(0), V = logits.size(1);
  cudaStream_t stream = current_stream();
  Tensor row_loss = Tensor::empty({N}, DType::f32, Device::cuda);  // (N)
  Tensor valid = Tensor::empty({N}, DType::f32, Device::cuda);     // (N)
  Tensor bad = Tensor::full({2}, -1.0, DType::i64, Device::cuda);  // (row, target) or all ones
  if (N > 0) {
    visit_float_dtype(logits.dtype(), "cross_entropy", [&](auto tag) {
      using T = decltype(tag);
      visit_index(targets, [&](auto itag) {
        using I = decltype(itag);
        auto kernel = rows_aligned(logits) ? cross_entropy_fwd_kernel<T, I, true> : cross_entropy_fwd_kernel<T, I, false>;
        kernel<<<grid_for(N, 1), kThreads, 0, stream>>>(static_cast<const T*>(logits.data_ptr()),
                                                        static_cast<const I*>(targets.data_ptr()), N, V, ignore_index,
                                                        lse.data<float>(), row_loss.data<float>(), valid.data<float>(),
                                                        static_cast<unsigned long long*>(bad.data_ptr()));
        CHECK_LAUNCH();
      });
    });
  }
  cross_entropy_mean_kernel<<<1, 1024, 0, stream>>>(row_loss.data<float>(), valid.data<float>(), N,
                                                    loss.data<float>(), count.data<float>());
  CHECK_LAUNCH();
  // read now (synchronises the stream), or after each replay inside a CUDA graph (tensor/graph.h)
  check_on_host(bad, [V, ignore_index](const std::vector<int64_t>& b) {
    if (b[0] >= 0)
      ST_THROW(ValueError, "cross_entropy: target " << b[1] << " at position " << b[0] << " is outside [0, V = " << V
                                                    << ") and is not ignore_index " << ignore_index);
  });
}

void cross_entropy_bwd(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& count,
                       const Tensor& dloss, int64_t ignore_index, Tensor& dlogits) {
  check_contiguous_cuda("cross_entropy", {&logits, &targets, &lse, &count, &dloss, &dlogits});
  const int64_t N = logits.size(0), V = logits.size(1);
  if (N == 0) return;
  visit_float_dtype(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    visit_index(targets, [&](auto itag) {
      using I = decltype(itag);
      const bool vec = rows_aligned(logits) && rows_aligned(dlogits);
      auto kernel = vec ? cross_entropy_bwd_kernel<T, I, true> : cross_entropy_bwd_kernel<T, I, false>;
      kernel<<<grid_for(N, 1), kThreads, 0, current_stream()>>>(
          static_cast<const T*>(logits.data_ptr()), static_cast<const I*>(targets.data_ptr()), lse.data<float>(),
          count.data<float>(), dloss.data<float>(), N, V, ignore_index, static_cast<T*>(dlogits.data_ptr()));
      CHECK_LAUNCH();
    });
  });
}

}  // namespace st::ops::cuda
