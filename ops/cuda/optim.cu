// CUDA optimizer kernels, one pass each over contiguous state:
//   adamw_step: PyTorch's single-tensor AdamW operation by operation, with the f32 master param,
//     m, v updated and the optional f16/bf16 copy param_lp written in the same pass; the raw
//     gradient is unscaled and clipped as it is loaded (two _rn products, ×1 when unused). Every
//     product and sum is an explicit _rn intrinsic (and fmaf where PyTorch fuses), so nvcc cannot
//     contract differently from the CPU kernel: results match ops/cpu/optim.cpp bit for bit.
//   sgd_step likewise; scale_ in place; sum_squares (double, fixed-order two-level reduction:
//     deterministic) and has_inf_nan synchronise the current stream to return their value.
#include "ops/cuda/common.cuh"
#include "ops/optim.h"

namespace st::ops::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kReduceBlocks = 1024;

// kernels

// param, m, v (n) f32; grad (n) any float; param_lp (n) f16/bf16 or null
template <class G, class L>
__global__ void adamw_kernel(float* p, const G* g, float* m, float* v, L* lp, int64_t n, AdamWScalars s,
                             GradScaleF32 gs) {
  const bool small_w = fabsf(s.lerp_w) < 0.5f;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float pi = __fmul_rn(p[i], s.decay);
    const float gi = __fmul_rn(__fmul_rn(to_float(g[i]), gs.unscale), gs.clip);
    const float mi = small_w ? fmaf(s.lerp_w, __fsub_rn(gi, m[i]), m[i])
                             : fmaf(__fsub_rn(s.lerp_w, 1.f), __fsub_rn(gi, m[i]), gi);
    const float vi = __fadd_rn(__fmul_rn(v[i], s.beta2), __fmul_rn(__fmul_rn(s.one_minus_b2, gi), gi));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
    pi = __fadd_rn(pi, __fdiv_rn(__fmul_rn(s.neg_step_size, mi), denom));
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
    if constexpr (!std::is_same_v<L, float>) {
      if (lp) lp[i] = from_float<L>(pi);
    }
  }
}

template <class G>
__global__ void sgd_kernel(float* p, const G* g, float* buf, int64_t n, float lr, float momentum, float wd,
                           bool first, GradScaleF32 gs) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float gi = __fmul_rn(__fmul_rn(to_float(g[i]), gs.unscale), gs.clip);
    if (wd != 0.f) gi = fmaf(p[i], wd, gi);
    if (buf) {
      buf[i] = first ? gi : __fadd_rn(__fmul_rn(buf[i], momentum), gi);
      gi = buf[i];
    }
    p[i] = fmaf(gi, -lr, p[i]);
  }
}

template <class T>
__global__ void scale_inplace_kernel(T* x, int64_t n, float s) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    x[i] = from_float<T>(__fmul_rn(to_float(x[i]), s));
}

// x (n) → partial (gridDim.x) double: Σ x² of this block's grid-stride slice
template <class T>
__global__ void sum_squares_partial_kernel(const T* x, int64_t n, double* partial) {
  __shared__ double scratch[32];
  double acc = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const double f = to_float(x[i]);
    acc += f * f;
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sum_partials_kernel(const double* partial, int nparts, double* out) {
  __shared__ double scratch[32];
  double acc = 0;
  for (int i = threadIdx.x; i < nparts; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) *out = acc;
}

template <class T>
__global__ void has_inf_nan_kernel(const T* x, int64_t n, int* flag) {
  bool bad = false;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    bad |= !isfinite(to_float(x[i]));
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

template <class Fn>
void visit_lp(const Tensor& lp, Fn&& fn) {
  if (!lp.defined()) return fn(float{});  // float = "no copy"
  if (lp.dtype() == DType::f16) return fn(half{});
  if (lp.dtype() == DType::bf16) return fn(bf16{});
  ST_THROW(DTypeError, "adamw_step: param_lp must be f16/bf16, got " << lp.describe());
}

}  // namespace

// launchers

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWScalars& s, Tensor& param_lp,
                GradScaleF32 gs) {
  check_contiguous_cuda("adamw_step", {&param, &grad, &m, &v, &param_lp});
  const int64_t n = param.numel();
  if (n == 0) return;
  visit_float_dtype(grad.dtype(), "adamw_step", [&](auto gtag) {
    using G = decltype(gtag);
    visit_lp(param_lp, [&](auto ltag) {
      using L = decltype(ltag);
      L* lp = param_lp.defined() ? static_cast<L*>(param_lp.data_ptr()) : nullptr;
      adamw_kernel<G, L><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
          param.data<float>(), static_cast<const G*>(grad.data_ptr()), m.data<float>(), v.data<float>(), lp, n, s, gs);
      CHECK_LAUNCH();
    });
  });
}

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buf, float lr, float momentum, float weight_decay,
              bool first_step, GradScaleF32 gs) {
  check_contiguous_cuda("sgd_step", {&param, &grad});
  const int64_t n = param.numel();
  if (n == 0) return;
  float* buf = momentum != 0.f ? momentum_buf.data<float>() : nullptr;
  visit_float_dtype(grad.dtype(), "sgd_step", [&](auto gtag) {
    using G = decltype(gtag);
    sgd_kernel<G><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
        param.data<float>(), static_cast<const G*>(grad.data_ptr()), buf, n, lr, momentum, weight_decay, first_step,
        gs);
    CHECK_LAUNCH();
  });
}

double sum_squares(const Tensor& x) {
  check_contiguous_cuda("sum_squares", {&x});
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  cudaStream_t stream = current_stream();
  const int blocks = static_cast<int>(grid_for(n, kThreads, kReduceBlocks));
  Tensor buf = Tensor::empty({2 * (blocks + 1)}, DType::f32, Device::cuda);  // (blocks + 1) doubles
  double* pd = static_cast<double*>(buf.data_ptr());
  visit_float_dtype(x.dtype(), "sum_squares", [&](auto tag) {
    using T = decltype(tag);
    sum_squares_partial_kernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(x.data_ptr()), n, pd);
    CHECK_LAUNCH();
  });
  sum_partials_kernel<<<1, 1024, 0, stream>>>(pd, blocks, pd + blocks);
  CHECK_LAUNCH();
  double out = 0;
  CHECK_CUDA(cudaMemcpyAsync(&out, pd + blocks, sizeof(double), cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  return out;
}

bool has_inf_nan(const Tensor& x) {
  check_contiguous_cuda("has_inf_nan", {&x});
  const int64_t n = x.numel();
  if (n == 0) return false;
  cudaStream_t stream = current_stream();
  Tensor flag = Tensor::zeros({1}, DType::i32, Device::cuda);
  visit_float_dtype(x.dtype(), "has_inf_nan", [&](auto tag) {
    using T = decltype(tag);
    has_inf_nan_kernel<T><<<grid_for(n, kThreads, kReduceBlocks), kThreads, 0, stream>>>(
        static_cast<const T*>(x.data_ptr()), n, flag.data<int32_t>());
    CHECK_LAUNCH();
  });
  int out = 0;
  CHECK_CUDA(cudaMemcpyAsync(&out, flag.data_ptr(), sizeof(int), cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  return out != 0;
}

void scale_(Tensor& x, double s) {
  check_contiguous_cuda("scale_", {&x});
  const int64_t n = x.numel();
  if (n == 0) return;
  visit_float_dtype(x.dtype(), "scale_", [&](auto tag) {
    using T = decltype(tag);
    scale_inplace_kernel<T><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(static_cast<T*>(x.data_ptr()), n,
                                                                                      static_cast<float>(s));
    CHECK_LAUNCH();
  });
}

}  // namespace st::ops::cuda
