// CUDA optimizer kernels, one pass each over contiguous state:
//   adamw_step: PyTorch's single-tensor AdamW operation by operation, with the f32 master param,
//     m, v updated and the optional f16/bf16 copy param_lp written in the same pass; the raw
//     gradient is unscaled and clipped as it is loaded (two _rn products, ×1 when unused). Every
//     product and sum is an explicit _rn intrinsic (and fmaf where PyTorch fuses), so nvcc cannot
//     contract differently from the CPU kernel: results match ops/cpu/optim.cpp bit for bit.
//   adamw_step_multi: the same element function (adamw_element) over a chunk table, as
//     grad_stats.cu does: one block per kChunk elements of a tensor, up to kMaxTensors tensors per
//     launch with pointers, sizes, dtype codes (grad f32/f16/bf16; copy none/f16/bf16) and an
//     index into ≤ kMaxScalars distinct AdamWScalars passed as a __grid_constant__ argument (no
//     host→device copy, no allocation, no sync; under the classic 4 KiB argument limit). A launch
//     ends at kMaxTensors tensors or at a kMaxScalars + 1-th distinct scalar set: GPT-2's 148
//     tensors (2 sets: with and without decay) take 3 launches. A block moves 4 elements per
//     thread and step (p, m, v as 16-byte float4, grad and copy as 4-element loads/stores) where
//     every pointer of its chunk is aligned to that width, element by element otherwise (views
//     at odd offsets).
//   sgd_step likewise; scale_ in place; sum_squares (double, fixed-order two-level reduction:
//     deterministic) and has_inf_nan synchronise the current stream to return their value.
#include <cstring>

#include "ops/cuda/common.cuh"
#include "ops/optim.h"
#include "ops/step_state.h"

namespace st::ops::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kReduceBlocks = 1024;

// chunk table of adamw_step_multi
constexpr int64_t kChunk = 8192;  // elements per block (a multiple of 4: aligned tensors keep aligned chunks)
constexpr int kMaxTensors = 60;   // per launch (the table within 4 KiB)
constexpr int kMaxScalars = 4;    // distinct AdamWScalars per launch
enum : uint8_t { kF32, kF16, kBF16, kNone };
constexpr int64_t kMaxBlocks = (int64_t{1} << 31) - 1;  // grid x limit

struct AdamWTable {
  float* p[kMaxTensors];
  float* m[kMaxTensors];
  float* v[kMaxTensors];
  const void* g[kMaxTensors];
  void* lp[kMaxTensors];
  float* snap[kMaxTensors];  // AdamWSlot::snapshot, or null
  int64_t numel[kMaxTensors];
  int first_block[kMaxTensors + 1];  // tensor i owns blocks [first_block[i], first_block[i + 1])
  AdamWScalars s[kMaxScalars];
  uint8_t g_code[kMaxTensors];   // kF32 / kF16 / kBF16
  uint8_t lp_code[kMaxTensors];  // kNone / kF16 / kBF16
  uint8_t s_index[kMaxTensors];  // into s
};
static_assert(sizeof(AdamWTable) + sizeof(int) + sizeof(GradScaleF32) + sizeof(void*) <= 4096,
              "the arguments fit the classic 4 KiB kernel-argument limit");

// 4 consecutive elements, loaded or stored as one 16-byte (f32) or 8-byte (f16/bf16) access
template <class T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};
template <class T>
__device__ inline Quad<T> load_quad(const T* p) {
  Quad<T> r;
  if constexpr (sizeof(T) == 4)
    *reinterpret_cast<float4*>(&r) = *reinterpret_cast<const float4*>(p);
  else
    *reinterpret_cast<uint2*>(&r) = *reinterpret_cast<const uint2*>(p);
  return r;
}
template <class T>
__device__ inline void store_quad(T* p, const Quad<T>& r) {
  if constexpr (sizeof(T) == 4)
    *reinterpret_cast<float4*>(p) = *reinterpret_cast<const float4*>(&r);
  else
    *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(&r);
}
template <class T>
__device__ inline bool quad_aligned(const T* p) {
  return (reinterpret_cast<uintptr_t>(p) & (4 * sizeof(T) - 1)) == 0;
}

// kernels

// One element of AdamW, shared by both kernels so that they cannot drift apart: p, m, v updated
// in place from g (the gradient as loaded, widened to f32) — ops/cpu/optim.cpp's order exactly.
__device__ __forceinline__ void adamw_element(float& p, float& m, float& v, float g, const AdamWScalars& s,
                                              GradScaleF32 gs) {
  const bool small_w = fabsf(s.lerp_w) < 0.5f;  // PyTorch's lerp picks its form by |w|
  float pi = __fmul_rn(p, s.decay);
  const float gi = __fmul_rn(__fmul_rn(g, gs.unscale), gs.clip);
  const float mi = small_w ? fmaf(s.lerp_w, __fsub_rn(gi, m), m) : fmaf(__fsub_rn(s.lerp_w, 1.f), __fsub_rn(gi, m), gi);
  const float vi = __fadd_rn(__fmul_rn(v, s.beta2), __fmul_rn(__fmul_rn(s.one_minus_b2, gi), gi));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
  pi = __fadd_rn(pi, __fdiv_rn(__fmul_rn(s.neg_step_size, mi), denom));
  p = pi;
  m = mi;
  v = vi;
}

// The chunk's p, m, v → its snapshot copies sp, sp + stride, sp + 2·stride (AdamWSlot::snapshot), by
// the whole block: what a skipped step leaves.
__device__ void snapshot_chunk(const float* p, const float* m, const float* v, float* sp, int64_t stride, int64_t n) {
  const float* src[3] = {p, m, v};
  int64_t i0 = 0;
  if (quad_aligned(p) && quad_aligned(m) && quad_aligned(v) && quad_aligned(sp)) {  // stride: a multiple of 4
    const int64_t quads = n / 4;
#pragma unroll
    for (int j = 0; j < 3; ++j)
      for (int64_t k = threadIdx.x; k < quads; k += blockDim.x) store_quad(sp + j * stride + 4 * k, load_quad(src[j] + 4 * k));
    i0 = quads * 4;
  }
  for (int j = 0; j < 3; ++j)
    for (int64_t i = i0 + threadIdx.x; i < n; i += blockDim.x) sp[j * stride + i] = src[j][i];
}

// param, m, v (n) f32; grad (n) any float; param_lp (n) f16/bf16 or null
template <class G, class L>
__global__ void adamw_kernel(float* p, const G* g, float* m, float* v, L* lp, int64_t n, AdamWScalars s,
                             GradScaleF32 gs) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float pi = p[i], mi = m[i], vi = v[i];
    adamw_element(pi, mi, vi, to_float(g[i]), s, gs);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
    if constexpr (!std::is_same_v<L, float>) {
      if (lp) lp[i] = from_float<L>(pi);
    }
  }
}

// One chunk (n elements) of one tensor of the table, by the whole block; lp null (L = float) when
// there is no copy; sp null when there is no snapshot (else p, m, v also go to sp, sp + stride,
// sp + 2·stride)
template <class G, class L>
__device__ void adamw_chunk(float* p, const G* g, float* m, float* v, L* lp, int64_t n, const AdamWScalars& s,
                            GradScaleF32 gs, float* sp, int64_t stride) {
  constexpr bool has_lp = !std::is_same_v<L, float>;
  int64_t i0 = 0;
  bool vec = quad_aligned(p) && quad_aligned(m) && quad_aligned(v) && quad_aligned(g);  // uniform over the block
  if constexpr (has_lp) vec = vec && quad_aligned(lp);
  if (sp) vec = vec && quad_aligned(sp);  // stride: a multiple of 4
  if (vec) {
    const int64_t quads = n / 4;
    for (int64_t k = threadIdx.x; k < quads; k += blockDim.x) {
      Quad<float> pq = load_quad(p + 4 * k), mq = load_quad(m + 4 * k), vq = load_quad(v + 4 * k);
      const Quad<G> gq = load_quad(g + 4 * k);
#pragma unroll
      for (int j = 0; j < 4; ++j) adamw_element(pq.v[j], mq.v[j], vq.v[j], to_float(gq.v[j]), s, gs);
      store_quad(m + 4 * k, mq);
      store_quad(v + 4 * k, vq);
      store_quad(p + 4 * k, pq);
      if (sp) {
        store_quad(sp + 4 * k, pq);
        store_quad(sp + stride + 4 * k, mq);
        store_quad(sp + 2 * stride + 4 * k, vq);
      }
      if constexpr (has_lp) {
        Quad<L> lq;
#pragma unroll
        for (int j = 0; j < 4; ++j) lq.v[j] = from_float<L>(pq.v[j]);
        store_quad(lp + 4 * k, lq);
      }
    }
    i0 = quads * 4;
  }
  for (int64_t i = i0 + threadIdx.x; i < n; i += blockDim.x) {
    float pi = p[i], mi = m[i], vi = v[i];
    adamw_element(pi, mi, vi, to_float(g[i]), s, gs);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
    if (sp) {
      sp[i] = pi;
      sp[stride + i] = mi;
      sp[2 * stride + i] = vi;
    }
    if constexpr (has_lp) lp[i] = from_float<L>(pi);
  }
}

template <class G>
__device__ void adamw_chunk_g(const AdamWTable& tab, int t, int64_t begin, int64_t n, const AdamWScalars& s,
                              GradScaleF32 gs, float* snap) {
  float* p = tab.p[t] + begin;
  float* m = tab.m[t] + begin;
  float* v = tab.v[t] + begin;
  const G* g = static_cast<const G*>(tab.g[t]) + begin;
  float* sp = snap ? snap + begin : nullptr;
  const int64_t stride = adamw_snapshot_stride(tab.numel[t]);
  switch (tab.lp_code[t]) {
    case kF16: adamw_chunk(p, g, m, v, static_cast<half*>(tab.lp[t]) + begin, n, s, gs, sp, stride); break;
    case kBF16: adamw_chunk(p, g, m, v, static_cast<bf16*>(tab.lp[t]) + begin, n, s, gs, sp, stride); break;
    default: adamw_chunk(p, g, m, v, static_cast<float*>(nullptr), n, s, gs, sp, stride); break;
  }
}

// one block per chunk of the `count` tensors of tab. st: a graph-captured step's state
// (ops/step_state.h): nothing when it skips, else its GradScale and scalars (s_index 0: with
// weight decay, 1: without) instead of gs and tab.s; the snapshot blocks only when it says so
// (then a skipped step copies the state as it is).
__global__ void adamw_multi_kernel(const __grid_constant__ AdamWTable tab, int count, GradScaleF32 gs,
                                   const DeviceStepState* st) {
  const bool snapshot = !st || st->snapshot;
  const bool skip = st && st->skip;
  if (skip && !snapshot) return;
  if (st) gs = st->gs;
  // this block's tensor: the last t with first_block[t] ≤ blockIdx.x (every listed tensor has a block)
  const int b = static_cast<int>(blockIdx.x);
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (tab.first_block[mid] <= b)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int64_t begin = static_cast<int64_t>(b - tab.first_block[lo]) * kChunk;
  const int64_t n = min(kChunk, tab.numel[lo] - begin);
  float* snap = snapshot ? tab.snap[lo] : nullptr;
  if (skip) {
    if (snap)
      snapshot_chunk(tab.p[lo] + begin, tab.m[lo] + begin, tab.v[lo] + begin, snap + begin,
                     adamw_snapshot_stride(tab.numel[lo]), n);
    return;
  }
  const AdamWScalars& s = st ? (tab.s_index[lo] == 0 ? st->with_wd : st->no_wd) : tab.s[tab.s_index[lo]];
  switch (tab.g_code[lo]) {
    case kF32: adamw_chunk_g<float>(tab, lo, begin, n, s, gs, snap); break;
    case kF16: adamw_chunk_g<half>(tab, lo, begin, n, s, gs, snap); break;
    default: adamw_chunk_g<bf16>(tab, lo, begin, n, s, gs, snap); break;
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

namespace {
// adamw_step_multi's launches; st (with decays) takes the scalars from a device step state
void adamw_multi(const std::vector<AdamWSlot>& slots, GradScaleF32 gs, const DeviceStepState* st,
                 const std::vector<bool>* decays) {
  auto code_of = [](DType d, size_t k) -> uint8_t {
    switch (d) {
      case DType::f32: return kF32;
      case DType::f16: return kF16;
      case DType::bf16: return kBF16;
      default: break;
    }
    ST_THROW(DTypeError, "adamw_step_multi: slot " << k << ": CUDA kernel needs f32/f16/bf16, got " << dtype_name(d));
  };
  for (size_t k = 0; k < slots.size(); ++k) {  // all checks before the first launch
    const AdamWSlot& sl = slots[k];
    check_contiguous_cuda("adamw_step_multi", {sl.param, sl.grad, sl.m, sl.v, &sl.param_lp});
    code_of(sl.grad->dtype(), k);
    ST_CHECK(!sl.param_lp.defined() || code_of(sl.param_lp.dtype(), k) != kF32, DTypeError,
             "adamw_step_multi: slot " << k << ": param_lp must be f16/bf16");
    ST_CHECK(sl.param->numel() / kChunk < kMaxBlocks, ValueError,
             "adamw_step_multi: slot " << k << ": " << sl.param->numel() << " elements is too many");
  }
  cudaStream_t stream = current_stream();
  AdamWTable tab{};
  int count = 0, nscalars = 0, blocks = 0;
  auto launch = [&] {
    if (count == 0) return;
    for (int k = count; k <= kMaxTensors; ++k) tab.first_block[k] = blocks;
    adamw_multi_kernel<<<blocks, kThreads, 0, stream>>>(tab, count, gs, st);
    CHECK_LAUNCH();
    count = nscalars = blocks = 0;
  };
  for (size_t k = 0; k < slots.size(); ++k) {
    const AdamWSlot& sl = slots[k];
    const int64_t n = sl.param->numel();
    if (n == 0) continue;
    const int64_t chunks = (n + kChunk - 1) / kChunk;  // ≤ kMaxBlocks (checked above)
    int si = 0;
    if (st) {
      si = (*decays)[k] ? 0 : 1;
      if (count == kMaxTensors || blocks + chunks > kMaxBlocks) launch();
    } else {
      while (si < nscalars && std::memcmp(&tab.s[si], &sl.s, sizeof(AdamWScalars)) != 0) ++si;
      if (count == kMaxTensors || (si == nscalars && nscalars == kMaxScalars) || blocks + chunks > kMaxBlocks) {
        launch();
        si = 0;
      }
      if (si == nscalars) tab.s[nscalars++] = sl.s;
    }
    tab.p[count] = sl.param->data<float>();
    tab.m[count] = sl.m->data<float>();
    tab.v[count] = sl.v->data<float>();
    tab.g[count] = sl.grad->data_ptr();
    tab.g_code[count] = code_of(sl.grad->dtype(), k);
    tab.lp[count] = sl.param_lp.defined() ? sl.param_lp.data_ptr() : nullptr;
    tab.lp_code[count] = sl.param_lp.defined() ? code_of(sl.param_lp.dtype(), k) : kNone;
    tab.snap[count] = sl.snapshot.defined() ? sl.snapshot.data<float>() : nullptr;
    tab.s_index[count] = static_cast<uint8_t>(si);
    tab.numel[count] = n;
    tab.first_block[count] = blocks;
    blocks += static_cast<int>(chunks);
    ++count;
  }
  launch();
}
}  // namespace

void adamw_step_multi(const std::vector<AdamWSlot>& slots, GradScaleF32 gs) { adamw_multi(slots, gs, nullptr, nullptr); }

void adamw_step_multi_state(const std::vector<AdamWSlot>& slots, const std::vector<bool>& decays,
                            const double* state) {
  adamw_multi(slots, {}, reinterpret_cast<const DeviceStepState*>(state), &decays);
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
