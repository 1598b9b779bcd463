// The FP8 GEMM's entry point (ops/fp8_matmul.h): checks, the output, the dispatch to the CPU
// emulation (ops/cpu/fp8_gemm.cpp) or cuBLASLt (ops/cuda/fp8_gemm.cu), and the optional amax of c.
#include "ops/fp8_matmul.h"

#include "ops/check.h"
#include "ops/fp8_quantize.h"
#include "tensor/autograd.h"

namespace st::ops {

Tensor fp8_matmul(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv,
                  DType out_dtype, const Tensor& amax, const Tensor& bias, Fp8Accum accum) {
  const char* op = "fp8_matmul";
  check_defined(op, {a, a_scale_inv, b, b_scale_inv});
  check_dtype(op, a, {DType::f8e4m3, DType::f8e5m2});
  check_dtype(op, b, {DType::f8e4m3, DType::f8e5m2});
  ST_CHECK(!(a.dtype() == DType::f8e5m2 && b.dtype() == DType::f8e5m2), DTypeError,
           op << ": e5m2 · e5m2 has no FP8 GEMM (one operand must be e4m3)");
  ST_CHECK(out_dtype == DType::f32 || out_dtype == DType::bf16 || out_dtype == DType::f16, DTypeError,
           op << ": the result must be f32, bf16 or f16, not " << dtype_name(out_dtype));
  for (const Tensor* s : {&a_scale_inv, &b_scale_inv})
    ST_CHECK(s->dtype() == DType::f32 && s->numel() == 1, ValueError,
             op << ": a scale must be a one-element f32 tensor, got " << s->describe());
  if (a.dim() != 2 || b.dim() != 2 || a.size(1) != b.size(1))
    ST_THROW(ShapeError, op << ": a " << shape_str(a.shape()) << " · b " << shape_str(b.shape())
                            << "ᵀ do not fit (expected (M, K) and (N, K))");
  check_same_device(op, {a, a_scale_inv, b, b_scale_inv});
  if (amax.defined()) {
    ST_CHECK(amax.dtype() == DType::f32 && amax.numel() == 1 && amax.is_contiguous(), ValueError,
             op << ": amax must be a one-element contiguous f32 tensor, got " << amax.describe());
    check_same_device(op, {a, amax});
  }
  if (bias.defined()) {
    ST_CHECK(bias.dim() == 1 && bias.size(0) == b.size(0), ShapeError,
             op << ": bias " << shape_str(bias.shape()) << " for an output of " << b.size(0) << " columns");
    check_same_device(op, {a, bias});
  }
  NoGradGuard ng;
  const Tensor bias_c = bias.defined() ? contiguous_as(bias.detach(), out_dtype) : Tensor();  // (N) out_dtype
  Tensor ac = a.contiguous(), bc = b.contiguous(), sa = a_scale_inv.contiguous(), sb = b_scale_inv.contiguous();
  Tensor c = Tensor::empty({a.size(0), b.size(0)}, out_dtype, a.device());  // (M, N)
  if (a.is_cuda()) {
    cuda::fp8_gemm(ac, sa.data<float>(), bc, sb.data<float>(), c, bias_c, accum);
    if (amax.defined()) cuda::fp8_amax(c, amax.data<float>());
  } else {
    cpu::fp8_gemm(ac, sa.data<float>(), bc, sb.data<float>(), c, bias_c);
    if (amax.defined()) cpu::fp8_amax(c, amax.data<float>());
  }
  return c;
}

}  // namespace st::ops
