// fp8_linear (ops/fp8_linear.h): three casts and three FP8 GEMMs around one autograd node.
#include "ops/fp8_linear.h"

#include "ops/check.h"
#include "ops/fp8_matmul.h"
#include "ops/fp8_quantize.h"
#include "ops/reduce.h"
#include "tensor/autograd.h"

namespace st::ops {

Fp8LinearState fp8_linear_state(const Fp8LinearOptions& o, Device device) {
  Fp8ScalingOptions s{Fp8Format::e4m3, o.mode, o.history, o.margin, o.pow2};
  Fp8LinearState st;
  st.x = fp8_scaling(s, device);
  st.w = fp8_scaling(s, device);
  s.format = o.grad_format;
  st.grad = fp8_scaling(s, device);
  st.forward_accum = o.forward_accum;
  return st;
}

void fp8_linear_update(Fp8LinearState& state) {
  fp8_scaling_update(state.x);
  fp8_scaling_update(state.w);
  fp8_scaling_update(state.grad);
}

Fp8Weight fp8_cast_weight(const Tensor& w, Fp8LinearState& state, bool out_in) {
  Fp8Tensor q = fp8_quantize(w, state.w, /*transpose=*/true, state.counts);  // w's layout and its transpose
  return out_in ? Fp8Weight{q.data_t, q.data, q.scale_inv} : Fp8Weight{q.data, q.data_t, q.scale_inv};
}

Tensor fp8_weight_grad(const Tensor& xt, const Tensor& xsi, const Tensor& gt, const Tensor& gsi, bool out_in,
                       DType dtype) {
  return out_in ? fp8_matmul(gt, gsi, xt, xsi, dtype)   // (N, M)·(K, M)ᵀ → (N, K)
                : fp8_matmul(xt, xsi, gt, gsi, dtype);  // (K, M)·(N, M)ᵀ → (K, N)
}

Tensor fp8_linear(const Tensor& x, const Tensor& w, const Tensor& bias, Fp8LinearState& state, bool w_out_in) {
  const char* op = "fp8_linear";
  check_defined(op, {x, w});
  const int64_t K = w.dim() == 2 ? w.size(w_out_in ? 1 : 0) : -1, N = w.dim() == 2 ? w.size(w_out_in ? 0 : 1) : -1;
  if (w.dim() != 2 || x.dim() < 1 || x.size(-1) != K)
    ST_THROW(ShapeError, op << ": input " << shape_str(x.shape()) << " and weight " << shape_str(w.shape())
                            << (w_out_in ? " (expected (C_out, C_in))" : " (expected (C_in, C_out))"));
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != N))
    ST_THROW(ShapeError, op << ": bias " << shape_str(bias.shape()) << " for weight " << shape_str(w.shape()));
  ST_CHECK(state.x.options.format == Fp8Format::e4m3 && state.w.options.format == Fp8Format::e4m3, ValueError,
           op << ": x and w are cast to e4m3 (the state's x / w scalings must be e4m3)");
  check_same_device(op, {x, w, state.x.state, state.w.state, state.grad.state});
  if (bias.defined()) check_same_device(op, {x, bias});
  Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, K});  // (M, K)
  const DType xdt = x.dtype(), wdt = w.dtype(), bdt = bias.defined() ? bias.dtype() : xdt;
  const bool gx = x2.requires_grad(), gw = w.requires_grad(), gb = bias.defined() && bias.requires_grad();
  Fp8Tensor qx;
  Fp8Weight qw;
  Tensor y;
  {
    NoGradGuard ng;
    qx = fp8_quantize(x2, state.x, /*transpose=*/gw, state.counts);  // x8 (M, K), x8ᵀ (K, M) for wgrad
    qw = fp8_cast_weight(w, state, w_out_in);                          // w8 (K, N), w8ᵀ (N, K)
    y = fp8_matmul(qx.data, qx.scale_inv, qw.w8t, qw.scale_inv, xdt, Tensor(), bias,
                   state.forward_accum);  // (M, N), + bias in the epilogue
  }
  Fp8Scaling gscaling = state.grad;  // shares the state buffer
  attach_grad_fn(y, op, {x2, w, bias},
                 [xt = qx.data_t, xsi = qx.scale_inv, w8 = qw.w8, wsi = qw.scale_inv, gscaling,
                  counts = state.counts, gx, gw, gb, w_out_in, xdt, wdt, bdt](const Tensor& g_in) mutable {
                   NoGradGuard ng;
                   Tensor g = g_in.contiguous();  // (M, N)
                   // g8 (M, N), g8ᵀ (N, M); with a bias, its gradient Σ_rows g summed by the cast as it reads g
                   Fp8Tensor qg = fp8_quantize(g, gscaling, /*transpose=*/gw, counts, /*column_sums=*/gb);
                   Tensor dx, dw, db;
                   if (gx) dx = fp8_matmul(qg.data, qg.scale_inv, w8, wsi, xdt);  // (M, N)·(K, N)ᵀ → (M, K)
                   if (gw) dw = fp8_weight_grad(xt, xsi, qg.data_t, qg.scale_inv, w_out_in, wdt);  // w's layout
                   if (gb) db = contiguous_as(qg.column_sums, bdt);  // (N)
                   return std::vector<Tensor>{dx, dw, db};
                 });
  if (x.dim() != 2) {
    Shape s = x.shape();
    s.back() = N;
    y = y.reshape(s);
  }
  return y;
}

}  // namespace st::ops
