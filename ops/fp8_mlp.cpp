// fp8_mlp (ops/fp8_mlp.h): fp8_linear's casts and products twice, the activation in the casts.
#include "ops/fp8_mlp.h"

#include <utility>

#include "ops/check.h"
#include "ops/fp8_matmul.h"
#include "ops/fp8_quantize.h"
#include "tensor/autograd.h"

namespace st::ops {
namespace {

// (in, out) of a weight in its layout; b (out) or undefined
std::pair<int64_t, int64_t> check_weight(const char* op, const Tensor& w, const Tensor& b, bool out_in,
                                         const char* which) {
  if (w.dim() != 2) ST_THROW(ShapeError, op << ": " << which << " weight " << shape_str(w.shape()) << " must be 2D");
  const int64_t in = w.size(out_in ? 1 : 0), out = w.size(out_in ? 0 : 1);
  if (b.defined() && (b.dim() != 1 || b.size(0) != out))
    ST_THROW(ShapeError, op << ": " << which << " bias " << shape_str(b.shape()) << " for weight " << shape_str(w.shape()));
  return {in, out};
}

}  // namespace

Tensor fp8_mlp(const Tensor& x, const Fp8MlpWeights& p, Fp8MlpAct act, Fp8LinearState& up, Fp8LinearState& down) {
  const char* op = "fp8_mlp";
  check_defined(op, {x, p.w_up, p.w_down});
  if (x.dim() < 1) ST_THROW(ShapeError, op << ": input must have at least one dim");
  const auto [C, U] = check_weight(op, p.w_up, p.b_up, p.out_in, "up");
  const auto [H, N] = check_weight(op, p.w_down, p.b_down, p.out_in, "down");
  const bool swiglu = act == Fp8MlpAct::swiglu;
  if (x.size(-1) != C || (swiglu && U % 2 != 0) || H != (swiglu ? U / 2 : U))
    ST_THROW(ShapeError, op << ": input " << shape_str(x.shape()) << ", up weight " << shape_str(p.w_up.shape())
                            << " and down weight " << shape_str(p.w_down.shape()) << " do not chain"
                            << (swiglu ? " (swiglu: up's width 2F, down's input F)" : ""));
  for (const Fp8LinearState* s : {&up, &down})
    ST_CHECK(s->x.options.format == Fp8Format::e4m3 && s->w.options.format == Fp8Format::e4m3, ValueError,
             op << ": inputs and weights are cast to e4m3 (the states' x / w scalings must be e4m3)");
  check_same_device(op, {x, p.w_up, p.w_down, up.x.state, up.w.state, up.grad.state, down.x.state, down.w.state,
                         down.grad.state});
  for (const Tensor* b : {&p.b_up, &p.b_down})
    if (b->defined()) check_same_device(op, {x, *b});
  const Fp8Act fwd = swiglu ? Fp8Act::swiglu : Fp8Act::gelu, bwd = swiglu ? Fp8Act::swiglu_grad : Fp8Act::gelu_grad;
  Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, C});  // (M, C)
  const DType xdt = x.dtype();
  const bool gx = x2.requires_grad(), gwu = p.w_up.requires_grad(), gbu = p.b_up.defined() && p.b_up.requires_grad();
  const bool gwd = p.w_down.requires_grad(), gbd = p.b_down.defined() && p.b_down.requires_grad();
  Fp8Tensor qx, qh;
  Fp8Weight qwu, qwd;
  Tensor pre, y;
  {
    NoGradGuard ng;
    // pre (M, U) = x8 · w_up8 + b_up; h8 (M, H), h8ᵀ = cast(act(pre)); y (M, N) = h8 · w_down8 + b_down
    qx = fp8_quantize(x2, up.x, /*transpose=*/gwu, up.counts);
    qwu = fp8_cast_weight(p.w_up, up, p.out_in);
    pre = fp8_matmul(qx.data, qx.scale_inv, qwu.w8t, qwu.scale_inv, xdt, Tensor(), p.b_up, up.forward_accum);
    qh = fp8_quantize_act(fwd, pre, Tensor(), down.x, down.counts);
    qwd = fp8_cast_weight(p.w_down, down, p.out_in);
    y = fp8_matmul(qh.data, qh.scale_inv, qwd.w8t, qwd.scale_inv, xdt, Tensor(), p.b_down, down.forward_accum);
  }
  const DType wudt = p.w_up.dtype(), wddt = p.w_down.dtype();
  const DType budt = p.b_up.defined() ? p.b_up.dtype() : xdt, bddt = p.b_down.defined() ? p.b_down.dtype() : xdt;
  Fp8Scaling gup = up.grad, gdown = down.grad;  // share the state buffers
  attach_grad_fn(
      y, op, {x2, p.w_up, p.b_up, p.w_down, p.b_down},
      [pre, bwd, out_in = p.out_in, xt = qx.data_t, xsi = qx.scale_inv, wu8 = qwu.w8, wusi = qwu.scale_inv,
       ht = qh.data_t, hsi = qh.scale_inv, wd8 = qwd.w8, wdsi = qwd.scale_inv, gup, gdown, ucounts = up.counts,
       dcounts = down.counts, gx, gwu, gbu, gwd, gbd, xdt, wudt, wddt, budt, bddt](const Tensor& g_in) mutable {
        NoGradGuard ng;
        Tensor g = g_in.contiguous();  // (M, N)
        Fp8Tensor qg = fp8_quantize(g, gdown, /*transpose=*/gwd, dcounts, /*column_sums=*/gbd);
        Tensor dx, dwu, dbu, dwd, dbd, dh;
        if (gwd) dwd = fp8_weight_grad(ht, hsi, qg.data_t, qg.scale_inv, out_in, wddt);  // w_down's layout
        if (gbd) dbd = contiguous_as(qg.column_sums, bddt);                              // (N)
        if (gx || gwu || gbu) dh = fp8_matmul(qg.data, qg.scale_inv, wd8, wdsi, xdt);   // (M, N)·(H, N)ᵀ → (M, H)
        qg = Fp8Tensor();  // down's part done: held no longer than the unfused down's node holds it
        if (dh.defined()) {
          // dpre8 (M, U), dpre8ᵀ = cast(act's input gradient), its column sums the up bias's gradient
          Fp8Tensor qd = fp8_quantize_act(bwd, pre, std::move(dh), gup, ucounts, /*column_sums=*/gbu);
          if (gx) dx = fp8_matmul(qd.data, qd.scale_inv, wu8, wusi, xdt);  // (M, U)·(C, U)ᵀ → (M, C)
          if (gwu) dwu = fp8_weight_grad(xt, xsi, qd.data_t, qd.scale_inv, out_in, wudt);  // w_up's layout
          if (gbu) dbu = contiguous_as(qd.column_sums, budt);                             // (U)
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
