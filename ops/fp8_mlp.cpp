// fp8_mlp_gelu (ops/fp8_mlp.h): fp8_linear's casts and products twice, the GELU in the casts.
#include "ops/fp8_mlp.h"

#include "ops/check.h"
#include "ops/fp8_matmul.h"
#include "ops/fp8_quantize.h"
#include "tensor/autograd.h"

namespace st::ops {
namespace {

// w (in, out) after an input of `in` columns; b (out) or undefined
void check_linear(const char* op, int64_t in, const Tensor& w, const Tensor& b, const char* which) {
  if (w.dim() != 2 || w.size(0) != in)
    ST_THROW(ShapeError, op << ": " << which << " weight " << shape_str(w.shape()) << " after an input of " << in
                            << " columns (expected (" << in << ", C_out))");
  if (b.defined() && (b.dim() != 1 || b.size(0) != w.size(1)))
    ST_THROW(ShapeError, op << ": " << which << " bias " << shape_str(b.shape()) << " for weight " << shape_str(w.shape()));
}

}  // namespace

Tensor fp8_mlp_gelu(const Tensor& x, const Tensor& w_up, const Tensor& b_up, const Tensor& w_down,
                    const Tensor& b_down, Fp8LinearState& up, Fp8LinearState& down) {
  const char* op = "fp8_mlp_gelu";
  check_defined(op, {x, w_up, w_down});
  if (x.dim() < 1) ST_THROW(ShapeError, op << ": input must have at least one dim");
  check_linear(op, x.size(-1), w_up, b_up, "up");
  check_linear(op, w_up.size(1), w_down, b_down, "down");
  for (const Fp8LinearState* s : {&up, &down})
    ST_CHECK(s->x.options.format == Fp8Format::e4m3 && s->w.options.format == Fp8Format::e4m3, ValueError,
             op << ": inputs and weights are cast to e4m3 (the states' x / w scalings must be e4m3)");
  check_same_device(op, {x, w_up, w_down, up.x.state, up.w.state, up.grad.state, down.x.state, down.w.state,
                         down.grad.state});
  for (const Tensor* b : {&b_up, &b_down})
    if (b->defined()) check_same_device(op, {x, *b});
  const int64_t C = w_up.size(0), N = w_down.size(1);
  Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, C});  // (M, C)
  const DType xdt = x.dtype();
  const bool gx = x2.requires_grad(), gwu = w_up.requires_grad(), gbu = b_up.defined() && b_up.requires_grad();
  const bool gwd = w_down.requires_grad(), gbd = b_down.defined() && b_down.requires_grad();
  Fp8Tensor qx, qwu, qh, qwd;
  Tensor pre, y;
  {
    NoGradGuard ng;
    // pre (M, U) = x8 · w_up8 + b_up; h8, h8ᵀ = cast(gelu(pre)); y (M, N) = h8 · w_down8 + b_down
    qx = fp8_quantize(x2, up.x, /*transpose=*/gwu, up.counts);
    qwu = fp8_quantize(w_up, up.w, /*transpose=*/true, up.counts);
    pre = fp8_matmul(qx.data, qx.scale_inv, qwu.data_t, qwu.scale_inv, xdt, Tensor(), b_up, up.forward_accum);
    qh = fp8_quantize_act(Fp8Act::gelu, pre, Tensor(), down.x, down.counts);
    qwd = fp8_quantize(w_down, down.w, /*transpose=*/true, down.counts);
    y = fp8_matmul(qh.data, qh.scale_inv, qwd.data_t, qwd.scale_inv, xdt, Tensor(), b_down, down.forward_accum);
  }
  const DType wudt = w_up.dtype(), wddt = w_down.dtype();
  const DType budt = b_up.defined() ? b_up.dtype() : xdt, bddt = b_down.defined() ? b_down.dtype() : xdt;
  Fp8Scaling gup = up.grad, gdown = down.grad;  // share the state buffers
  attach_grad_fn(
      y, op, {x2, w_up, b_up, w_down, b_down},
      [pre, xt = qx.data_t, xsi = qx.scale_inv, wu8 = qwu.data, wusi = qwu.scale_inv, ht = qh.data_t,
       hsi = qh.scale_inv, wd8 = qwd.data, wdsi = qwd.scale_inv, gup, gdown, ucounts = up.counts,
       dcounts = down.counts, gx, gwu, gbu, gwd, gbd, xdt, wudt, wddt, budt, bddt](const Tensor& g_in) mutable {
        NoGradGuard ng;
        Tensor g = g_in.contiguous();  // (M, N)
        Fp8Tensor qg = fp8_quantize(g, gdown, /*transpose=*/gwd, dcounts, /*column_sums=*/gbd);
        Tensor dx, dwu, dbu, dwd, dbd;
        if (gwd) dwd = fp8_matmul(ht, hsi, qg.data_t, qg.scale_inv, wddt);  // (U, M)·(N, M)ᵀ → (U, N)
        if (gbd) dbd = contiguous_as(qg.column_sums, bddt);                // (N)
        if (gx || gwu || gbu) {
          Tensor dh = fp8_matmul(qg.data, qg.scale_inv, wd8, wdsi, xdt);  // (M, N)·(U, N)ᵀ → (M, U)
          // dpre8, dpre8ᵀ = cast(dh · gelu'(pre)), its column sums the up bias's gradient
          Fp8Tensor qd = fp8_quantize_act(Fp8Act::gelu_grad, pre, dh, gup, ucounts, /*column_sums=*/gbu);
          if (gx) dx = fp8_matmul(qd.data, qd.scale_inv, wu8, wusi, xdt);  // (M, U)·(C, U)ᵀ → (M, C)
          if (gwu) dwu = fp8_matmul(xt, xsi, qd.data_t, qd.scale_inv, wudt);  // (C, M)·(U, M)ᵀ → (C, U)
          if (gbu) dbu = contiguous_as(qd.column_sums, budt);               // (U)
        }
        return std::vector<Tensor>{dx, dwu, dbu, dwd, dbd};
      });
  if (x.dim() != 2) {
    Shape s = x.shape();
    s.back() = N;
    y = y.reshape(s);
  }
  return y;
}

}  // namespace st::ops
