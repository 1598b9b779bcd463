// Sequence parallelism's fused linears (see the header): collectives along T started here and
// waited for later, the GEMMs of ops::linear / linear_nt and of their backward nodes.
#include "runtime/parallel/sp_linear.h"

#include <algorithm>

#include "ops/check.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "tensor/autograd.h"

namespace st::runtime {
namespace {

void check_group(const TpGroup& tp, const char* op) {
  ST_CHECK(tp && tp->size() > 1, ValueError, op << ": needs a tensor-parallel group of at least 2 ranks");
}

void check_seq(const Tensor& x, const char* op) {
  ST_CHECK(x.defined() && x.dim() >= 2, ShapeError,
           op << ": needs a (B, T, ...) tensor, got " << (x.defined() ? x.describe() : std::string("undefined")));
}

// An all-gather along T in flight: x (B, n, rest) → (B, tp·n, rest) once finished.
struct SeqGather {
  Tensor src, buf;  // the contiguous input; (tp, B, n, rest), rank q's block q
  comm::WorkPtr work;
  Shape out_shape;
};
SeqGather start_gather(const Tensor& x, comm::Communicator& tp) {
  NoGradGuard ng;
  SeqGather g;
  const int64_t p = tp.size(), B = x.size(0), n = x.size(1), M = x.numel(), rest = B * n > 0 ? M / (B * n) : 0;
  g.src = x.detach().contiguous();                                 // (B, n, rest)
  g.buf = Tensor::empty({p, B, n, rest}, x.dtype(), x.device());   // (tp, B, n, rest)
  g.work = tp.all_gather(g.src.view({M}), g.buf.view({p * M}));
  g.out_shape = x.shape();
  g.out_shape[1] = p * n;
  return g;
}
Tensor finish_gather(SeqGather& g) {  // (B, tp·n, ...); the staging buffers released
  NoGradGuard ng;
  g.work->wait();
  Tensor out = g.buf.permute({1, 0, 2, 3}).contiguous().view(g.out_shape);  // (B, tp, n, rest) → (B, T, ...)
  g = SeqGather{};
  return out;
}

// A reduce-scatter along T in flight: x (B, T, rest) partial sums → this rank's (B, T/tp, rest).
struct SeqReduceScatter {
  Tensor src, out;  // (tp, B, n, rest) rank q's positions in block q; (B·n·rest) this rank's block
  comm::WorkPtr work;
  Shape out_shape;
};
SeqReduceScatter start_reduce_scatter(const Tensor& x, comm::Communicator& tp) {
  const int64_t p = tp.size(), B = x.size(0), T = x.size(1);
  ST_CHECK(T % p == 0, ShapeError,
           "sp linear: sequence length " << T << " of " << x.describe() << " does not divide by tp " << p);
  NoGradGuard ng;
  SeqReduceScatter r;
  const int64_t n = T / p, M = x.numel(), rest = B * T > 0 ? M / (B * T) : 0;
  r.src = x.detach().reshape({B, p, n, rest}).permute({1, 0, 2, 3}).contiguous();  // (tp, B, n, rest)
  r.out = Tensor::empty({B * n * rest}, x.dtype(), x.device());
  r.work = tp.reduce_scatter(r.src.view({M}), r.out, comm::ReduceOp::sum);
  r.out_shape = x.shape();
  r.out_shape[1] = n;
  return r;
}
Tensor finish_reduce_scatter(SeqReduceScatter& r) {  // (B, T/tp, ...)
  r.work->wait();
  Tensor out = r.out.view(r.out_shape);
  r = SeqReduceScatter{};
  return out;
}

// The forward product of local_linear without FP8: x (..., K) → (..., N).
Tensor product(const Tensor& x, const Tensor& w, const Tensor& b, bool out_in) {
  return out_in ? ops::linear_nt(x, w, b) : ops::linear(x, w, b);
}

bool half_cuda(const Tensor& t) { return t.is_cuda() && (t.dtype() == DType::f16 || t.dtype() == DType::bf16); }

// The backward GEMMs of ops::linear / linear_nt on 2-D operands: x2 (M, K), g2 (M, N).
//   dx (M, K) = g2·wᵀ, or g2·w when out_in (matmul's backward of x2·w / x2·wᵀ)
Tensor input_grad(const Tensor& g2, const Tensor& w, bool out_in) { return ops::matmul(g2, w, false, !out_in); }
//   dw = x2ᵀ·g2 (K, N), or g2ᵀ·x2 (N, K) when out_in; db (N) = Σ_rows g2 (the bias add's backward,
//   or on CUDA f16/bf16 the weight GEMM's bias-gradient epilogue, as ops::linear's fused node)
void weight_grads(const Tensor& x2, const Tensor& g2_in, const Tensor& w, const Tensor& b, bool out_in, bool want_w,
                  bool want_b, Tensor& dw, Tensor& db) {
  if (!out_in && want_w && b.defined() && half_cuda(x2) && w.dtype() == x2.dtype() && b.dtype() == x2.dtype() &&
      w.is_cuda() && b.is_cuda()) {
    const int64_t M = x2.size(0), K = x2.size(1), N = w.size(1);
    Tensor g = ops::contiguous_as(g2_in, x2.dtype()), xd = x2.contiguous();  // (M, N), (M, K)
    Tensor w_grad = Tensor::empty({K, N}, x2.dtype(), x2.device()), b_grad = Tensor::empty({N}, x2.dtype(), x2.device());
    if (ops::cuda::gemm_lt(xd, g, w_grad, true, false, K, N, M, ops::cuda::LtEpilogue::bgrad_b, Tensor(), Tensor(),
                           b_grad)) {
      dw = w_grad;
      if (want_b) db = b_grad;
      return;
    }
  }
  if (want_w) dw = out_in ? ops::matmul(g2_in, x2, true, false) : ops::matmul(x2, g2_in, true, false);
  if (want_b && b.defined()) db = ops::sum_to_shape(g2_in, b.shape());
}

// w (N, K) when out_in, else (K, N), for x (..., K)
void check_weight(const Tensor& x, const Tensor& w, bool out_in, const char* name) {
  const int64_t K = x.size(-1);
  ST_CHECK(w.defined() && w.dim() == 2 && w.size(out_in ? 1 : 0) == K, ShapeError,
           name << ": weight " << (w.defined() ? w.describe() : std::string("undefined")) << " for input "
                << shape_str(x.shape()));
}

}  // namespace

Tensor sp_column_linear(const Tensor& x, const Tensor& w, const Tensor& b, bool out_in, const TpGroup& tp) {
  const char* name = "sp_column_linear";
  check_group(tp, name);
  check_seq(x, name);
  check_weight(x, w, out_in, name);
  Tensor y;
  {
    NoGradGuard ng;
    SeqGather gather = start_gather(x, *tp);
    const Tensor X = finish_gather(gather);                   // (B, T, K), freed at the end of this scope
    y = product(X, w.detach(), b.defined() ? b.detach() : Tensor(), out_in);  // (B, T, N)
  }
  const bool gx = x.requires_grad(), gw = w.requires_grad(), gb = b.defined() && b.requires_grad();
  const Tensor xd = x.detach(), wd = w.detach(), bd = b.defined() ? b.detach() : Tensor();
  // backward: g (B, T, N) → dx (B, T/tp, K), dw (w's shape), db (N)
  attach_grad_fn(y, name, {x, w, b}, [xd, wd, bd, out_in, gx, gw, gb, tp](const Tensor& g) {
    SeqGather gather;
    if (gw || gb) gather = start_gather(xd, *tp);  // 1. X again, in flight during dX
    const int64_t N = g.size(-1), M = g.numel() / std::max<int64_t>(N, 1);
    const Tensor g2 = g.reshape({M, N});  // (M, N), M = B·T
    SeqReduceScatter rs;
    if (gx) {  // 2. dX (B, T, K), its reduce-scatter in flight during dW
      Shape xs = g.shape();
      xs.back() = wd.size(out_in ? 1 : 0);
      rs = start_reduce_scatter(input_grad(g2, wd, out_in).view(xs), *tp);
    }
    Tensor dw, db;
    if (gw || gb) {  // 3. dW, db from the re-gathered X
      const Tensor X = finish_gather(gather);  // (B, T, K)
      weight_grads(X.reshape({M, X.size(-1)}), g2, wd, bd, out_in, gw, gb, dw, db);
    }
    Tensor dx = gx ? finish_reduce_scatter(rs) : Tensor();  // 4. (B, T/tp, K)
    return std::vector<Tensor>{dx, gw ? dw : Tensor(), gb ? db : Tensor()};
  });
  return y;
}

Tensor sp_row_linear(const Tensor& x, const Tensor& w, bool out_in, const TpGroup& tp) {
  const char* name = "sp_row_linear";
  check_group(tp, name);
  check_seq(x, name);
  check_weight(x, w, out_in, name);
  Tensor y;
  {
    NoGradGuard ng;
    SeqReduceScatter rs = start_reduce_scatter(product(x.detach(), w.detach(), Tensor(), out_in), *tp);  // (B, T, N) partial sums
    y = finish_reduce_scatter(rs);  // (B, T/tp, N); the partial sums freed with rs
  }
  const bool gx = x.requires_grad(), gw = w.requires_grad();
  const Tensor xd = x.detach(), wd = w.detach();
  // backward: g (B, T/tp, N) → G (B, T, N) gathered → dx (B, T, K), dw (w's shape)
  attach_grad_fn(y, name, {x, w}, [xd, wd, out_in, gx, gw, tp](const Tensor& g) {
    SeqGather gather = start_gather(g, *tp);
    const Tensor G = finish_gather(gather);  // (B, T, N)
    const int64_t N = G.size(-1), M = G.numel() / std::max<int64_t>(N, 1);
    const Tensor g2 = G.reshape({M, N});
    Tensor dx, dw, db;
    if (gx) dx = input_grad(g2, wd, out_in).view(xd.shape());  // (B, T, K)
    if (gw) weight_grads(xd.reshape({M, xd.size(-1)}), g2, wd, Tensor(), out_in, true, false, dw, db);
    return std::vector<Tensor>{dx, dw};
  });
  return y;
}

}  // namespace st::runtime
