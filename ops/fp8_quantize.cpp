// FP8 casts with a per-tensor scale (ops/fp8_quantize.h): checks, the order of the passes
// (current scaling: amax, then the scale, then the cast; delayed: the cast alone, recording amax),
// the activation casts (fused on CUDA under delayed scaling, else the activation, then the cast),
// and the dispatch to ops/cpu/fp8_cast.cpp or ops/cuda/fp8_cast.cu.
#include "ops/fp8_quantize.h"

#include "ops/activation.h"
#include "ops/check.h"
#include "ops/swiglu.h"
#include "tensor/autograd.h"

namespace st::ops {
namespace {

void check_input(const char* op, const Tensor& x) {
  check_defined(op, {x});
  check_dtype(op, x, {DType::f32, DType::f16, DType::bf16});
  if (x.dim() < 1) ST_THROW(ShapeError, op << ": needs at least one dim, got a scalar");
}

}  // namespace

Tensor fp8_amax(const Tensor& x) {
  check_input("fp8_amax", x);
  NoGradGuard ng;
  Tensor xc = x.detach().contiguous();
  Tensor amax = Tensor::zeros({1}, DType::f32, x.device());
  if (x.is_cuda())
    cuda::fp8_amax(xc, amax.data<float>());
  else
    cpu::fp8_amax(xc, amax.data<float>());
  return amax;
}

namespace {

// counts' (2) i64 [overflow, underflow] on x's device, or none
int64_t* counts_ptr(const char* op, const Tensor& counts, const Tensor& x) {
  if (!counts.defined()) return nullptr;
  ST_CHECK(counts.dtype() == DType::i64 && counts.numel() == 2 && counts.is_contiguous(), ValueError,
           op << ": counts must be a contiguous (2) i64 tensor, got " << counts.describe());
  check_device(op, counts, x.device());
  return counts.data<int64_t>();
}

// The outputs of a cast of an x of `shape` (..., C), seen as (R, C), to fp8 `dt` on `device`
Fp8Tensor cast_outputs(const Shape& shape, DType dt, Device device, bool transpose, bool column_sums) {
  const int64_t C = shape.back(), R = C > 0 ? shape_numel(shape) / C : 0;
  Fp8Tensor q;
  q.data = Tensor::empty(shape, dt, device);                               // (..., C)
  if (transpose) q.data_t = Tensor::empty({C, R}, dt, device);              // (C, R)
  q.scale_inv = Tensor::empty({1}, DType::f32, device);                     // (1)
  if (column_sums) q.column_sums = Tensor::empty({C}, DType::f32, device);  // (C)
  return q;
}

}  // namespace

Fp8Tensor fp8_quantize(const Tensor& x, Fp8Scaling& scaling, bool transpose, const Tensor& counts, bool column_sums) {
  check_input("fp8_quantize", x);
  float* state = fp8_state_ptr(scaling, "fp8_quantize");
  check_device("fp8_quantize", x, scaling.state.device());
  int64_t* cnt = counts_ptr("fp8_quantize", counts, x);
  NoGradGuard ng;
  Tensor xc = x.detach().contiguous();
  const int64_t C = x.size(-1), R = C > 0 ? x.numel() / C : 0;
  Fp8Tensor q = cast_outputs(x.shape(), fp8_dtype(scaling.options.format), x.device(), transpose, column_sums);
  float* cs = column_sums ? q.column_sums.data<float>() : nullptr;
  Tensor x2 = xc.view({R, C}), d2 = q.data.view({R, C});
  const bool current = scaling.options.mode == Fp8ScaleMode::current;
  float* si = q.scale_inv.data<float>();
  if (x.is_cuda()) {
    if (current) {
      cuda::fp8_zero(state + kFp8Amax);
      cuda::fp8_amax(xc, state + kFp8Amax);
      cuda::fp8_scale_current(state, scaling.options);
    }
    cuda::fp8_cast(x2, d2, q.data_t, state, !current, si, cnt, cs);
  } else {
    if (current) {
      state[kFp8Amax] = 0.f;
      cpu::fp8_amax(xc, state + kFp8Amax);
      cpu::fp8_scale_current(state, scaling.options);
    }
    cpu::fp8_cast(x2, d2, q.data_t, state, !current, si, cnt, cs);
  }
  return q;
}

Fp8Tensor fp8_quantize_act(Fp8Act act, const Tensor& pre, Tensor dy, Fp8Scaling& scaling, const Tensor& counts,
                           bool column_sums) {
  const char* op = "fp8_quantize_act";
  check_input(op, pre);
  const bool grad = fp8_act_is_grad(act), swiglu = fp8_act_is_swiglu(act);
  const int64_t W = pre.size(-1), R = W > 0 ? pre.numel() / W : 0;  // pre (R, W)
  if (swiglu) ST_CHECK(W % 2 == 0, ShapeError, op << ": swiglu's input " << pre.describe() << " must be [gate | up] (..., 2F)");
  const int64_t C = act == Fp8Act::swiglu ? W / 2 : W;  // x (R, C)
  if (grad) {
    check_input(op, dy);
    Shape want = pre.shape();
    want.back() = swiglu ? W / 2 : W;
    ST_CHECK(dy.dtype() == pre.dtype() && dy.shape() == want, ShapeError,
             op << ": dy " << dy.describe() << " must be (" << shape_str(want) << ") of pre's dtype (pre "
                << pre.describe() << ")");
    check_same_device(op, {pre, dy});
  }
  float* state = fp8_state_ptr(scaling, op);
  check_device(op, pre, scaling.state.device());
  int64_t* cnt = counts_ptr(op, counts, pre);
  NoGradGuard ng;
  Tensor p2 = pre.detach().contiguous().view({R, W}), d2 = grad ? dy.detach().contiguous().view({R, dy.size(-1)}) : Tensor();
  Shape xs = pre.shape();  // x (..., C)
  xs.back() = C;
  if (pre.is_cuda() && scaling.options.mode == Fp8ScaleMode::delayed) {  // x computed as the cast reads pre, dy
    Fp8Tensor q = cast_outputs(xs, fp8_dtype(scaling.options.format), pre.device(), true, column_sums);
    Tensor q2 = q.data.view({R, C});
    if (cuda::fp8_cast_act(act, p2, d2, q2, q.data_t, state, true, q.scale_inv.data<float>(), cnt,
                           column_sums ? q.column_sums.data<float>() : nullptr))
      return q;
  }
  Tensor x = Tensor::empty(xs, pre.dtype(), pre.device()), x2 = x.view({R, C});  // written, then cast
  switch (act) {
    case Fp8Act::gelu: pre.is_cuda() ? cuda::gelu_fwd(p2, x2) : cpu::gelu_fwd(p2, x2); break;
    case Fp8Act::gelu_grad: pre.is_cuda() ? cuda::gelu_bwd(p2, d2, x2) : cpu::gelu_bwd(p2, d2, x2); break;
    case Fp8Act::swiglu: pre.is_cuda() ? cuda::swiglu_fwd(p2, x2) : cpu::swiglu_fwd(p2, x2); break;
    case Fp8Act::swiglu_grad: pre.is_cuda() ? cuda::swiglu_bwd(p2, d2, x2) : cpu::swiglu_bwd(p2, d2, x2); break;
  }
  d2 = dy = Tensor();  // x replaces dy (freed here when the caller moved it in)
  return fp8_quantize(x, scaling, true, counts, column_sums);
}

Tensor fp8_dequantize(const Fp8Tensor& q, DType dtype) {
  check_defined("fp8_dequantize", {q.data, q.scale_inv});
  check_dtype("fp8_dequantize", q.data, {DType::f8e4m3, DType::f8e5m2});
  ST_CHECK(dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16, DTypeError,
           "fp8_dequantize: the result must be f32, f16 or bf16, not " << dtype_name(dtype));
  ST_CHECK(q.scale_inv.dtype() == DType::f32 && q.scale_inv.numel() == 1, ValueError,
           "fp8_dequantize: scale_inv must be a one-element f32 tensor, got " << q.scale_inv.describe());
  check_same_device("fp8_dequantize", {q.data, q.scale_inv});
  NoGradGuard ng;
  Tensor data = q.data.contiguous(), si = q.scale_inv.contiguous();
  Tensor out = Tensor::empty(data.shape(), dtype, data.device());
  if (data.is_cuda())
    cuda::fp8_dequantize(data, si.data<float>(), out);
  else
    cpu::fp8_dequantize(data, si.data<float>(), out);
  return out;
}

}  // namespace st::ops
