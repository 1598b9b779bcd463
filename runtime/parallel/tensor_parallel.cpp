// Paired tensor-parallel autograd functions: each forward runs under NoGradGuard on detached
// tensors and attaches one Node whose backward is the conjugate collective.
#include "runtime/parallel/tensor_parallel.h"

#include "tensor/autograd.h"

namespace st::runtime {
namespace {

bool trivial(const TpGroup& tp) { return tp == nullptr || tp->size() == 1; }

void check_last_dim(const Tensor& x, const char* op) {
  ST_CHECK(
      x.defined() && x.dim() >= 1, ShapeError,
      op << ": needs a tensor of at least one dim, got " << (x.defined() ? x.describe() : std::string("undefined")));
}

Tensor all_reduce(const Tensor& x, comm::Communicator& tp, comm::ReduceOp op) {
  NoGradGuard ng;
  Tensor buf = Tensor::empty(x.shape(), x.dtype(), x.device());  // (...) fresh, contiguous
  buf.copy_(x.detach());
  tp.all_reduce(buf, op)->wait();
  return buf;
}

void check_seq_dim(const Tensor& x, const char* op) {
  ST_CHECK(
      x.defined() && x.dim() >= 2, ShapeError,
      op << ": needs a (B, T, ...) tensor, got " << (x.defined() ? x.describe() : std::string("undefined")));
}

}  // namespace

int tp_rank(const TpGroup& tp) { return tp ? tp->rank() : 0; }
int tp_size(const TpGroup& tp) { return tp ? tp->size() : 1; }

Tensor tp_all_reduce_sum(const Tensor& x, comm::Communicator& tp) { return all_reduce(x, tp, comm::ReduceOp::sum); }
Tensor tp_all_reduce_max(const Tensor& x, comm::Communicator& tp) { return all_reduce(x, tp, comm::ReduceOp::max); }

Tensor tp_all_gather_last_dim(const Tensor& x, comm::Communicator& tp) {
  check_last_dim(x, "all_gather_last_dim");
  NoGradGuard ng;
  const int64_t p = tp.size(), n = x.size(-1), M = x.numel(), R = n > 0 ? M / n : 0;
  Tensor src = x.detach().contiguous();                          // (..., n)
  Tensor buf = Tensor::empty({p, R, n}, x.dtype(), x.device());  // (tp, rows, n): rank r's block r
  tp.all_gather(src.view({M}), buf.view({p * M}))->wait();
  Shape out_shape = x.shape();
  out_shape.back() = p * n;
  return buf.permute({1, 0, 2}).contiguous().view(out_shape);  // (rows, tp, n) → (..., tp·n)
}

Tensor tp_all_gather_seq(const Tensor& x, comm::Communicator& tp) {
  check_seq_dim(x, "all_gather_seq");
  NoGradGuard ng;
  const int64_t p = tp.size(), B = x.size(0), n = x.size(1), M = x.numel(), rest = B * n > 0 ? M / (B * n) : 0;
  Tensor src = x.detach().contiguous();                              // (B, n, ...)
  Tensor buf = Tensor::empty({p, B, n, rest}, x.dtype(), x.device());  // (tp, B, n, rest): rank q's block q
  tp.all_gather(src.view({M}), buf.view({p * M}))->wait();
  Shape out_shape = x.shape();
  out_shape[1] = p * n;
  return buf.permute({1, 0, 2, 3}).contiguous().view(out_shape);  // (B, tp, n, rest) → (B, tp·n, ...)
}

Tensor tp_reduce_scatter_seq(const Tensor& x, comm::Communicator& tp) {
  check_seq_dim(x, "reduce_scatter_seq");
  const int64_t p = tp.size(), B = x.size(0), T = x.size(1);
  ST_CHECK(T % p == 0, ShapeError,
           "reduce_scatter_seq: sequence length " << T << " of " << x.describe() << " does not divide by tp " << p);
  NoGradGuard ng;
  const int64_t n = T / p, M = x.numel(), rest = B * T > 0 ? M / (B * T) : 0;
  // (B, T, ...) → (B, tp, n, rest) → (tp, B, n, rest) contiguous: rank q's block is its positions
  Tensor src = x.detach().reshape({B, p, n, rest}).permute({1, 0, 2, 3}).contiguous();
  Tensor out = Tensor::empty({B * n * rest}, x.dtype(), x.device());  // (B·n·rest) this rank's block
  tp.reduce_scatter(src.view({M}), out, comm::ReduceOp::sum)->wait();
  Shape out_shape = x.shape();
  out_shape[1] = n;
  return out.view(out_shape);  // (B, n, ...)
}

Tensor copy_to_tp(const Tensor& x, const TpGroup& tp) {
  if (trivial(tp)) return x;
  Tensor out = x.detach();  // (...) same storage, own autograd node
  // backward: dy (...) → dx = Σ_ranks dy (...)
  attach_grad_fn(out, "copy_to_tp", {x},
                 [tp](const Tensor& g) { return std::vector<Tensor>{tp_all_reduce_sum(g, *tp)}; });
  return out;
}

Tensor reduce_from_tp(const Tensor& x, const TpGroup& tp) {
  if (trivial(tp)) return x;
  Tensor out = tp_all_reduce_sum(x, *tp);  // (...) Σ_ranks x
  // backward: dy (...) → dx = dy
  attach_grad_fn(out, "reduce_from_tp", {x}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return out;
}

Tensor gather_from_tp(const Tensor& x, const TpGroup& tp) {
  check_last_dim(x, "gather_from_tp");
  if (trivial(tp)) return x;
  const int64_t n = x.size(-1), r = tp->rank();
  Tensor out = tp_all_gather_last_dim(x, *tp);  // (..., tp·n)
  // backward: dy (..., tp·n) → dx = dy[..., r·n : (r+1)·n] (..., n)
  attach_grad_fn(out, "gather_from_tp", {x},
                 [n, r](const Tensor& g) { return std::vector<Tensor>{g.narrow(-1, r * n, n).contiguous()}; });
  return out;
}

Tensor scatter_to_tp(const Tensor& x, const TpGroup& tp) {
  check_last_dim(x, "scatter_to_tp");
  if (trivial(tp)) return x;
  const int64_t p = tp->size(), r = tp->rank(), full = x.size(-1);
  ST_CHECK(full % p == 0, ShapeError,
           "scatter_to_tp: last dim " << full << " of " << x.describe() << " does not divide by tp " << p);
  const int64_t n = full / p;
  Tensor out;
  {
    NoGradGuard ng;
    out = x.detach().narrow(-1, r * n, n).contiguous();  // (..., n), a copy unless x has one row
  }
  // backward: dy (..., n) → dx = all-gather along the last dim (..., tp·n)
  attach_grad_fn(out, "scatter_to_tp", {x},
                 [tp](const Tensor& g) { return std::vector<Tensor>{tp_all_gather_last_dim(g, *tp)}; });
  return out;
}

Tensor gather_seq_from_sp(const Tensor& x, const TpGroup& tp) {
  check_seq_dim(x, "gather_seq_from_sp");
  if (trivial(tp)) return x;
  Tensor out = tp_all_gather_seq(x, *tp);  // (B, T, ...)
  // backward: dy (B, T, ...) → dx = Σ_ranks dy at this rank's positions (B, T/tp, ...)
  attach_grad_fn(out, "gather_seq_from_sp", {x},
                 [tp](const Tensor& g) { return std::vector<Tensor>{tp_reduce_scatter_seq(g, *tp)}; });
  return out;
}

Tensor reduce_scatter_seq_to_sp(const Tensor& x, const TpGroup& tp) {
  check_seq_dim(x, "reduce_scatter_seq_to_sp");
  if (trivial(tp)) return x;
  Tensor out = tp_reduce_scatter_seq(x, *tp);  // (B, T/tp, ...)
  // backward: dy (B, T/tp, ...) → dx = all-gather along T (B, T, ...)
  attach_grad_fn(out, "reduce_scatter_seq_to_sp", {x},
                 [tp](const Tensor& g) { return std::vector<Tensor>{tp_all_gather_seq(g, *tp)}; });
  return out;
}

Tensor scatter_seq_to_sp(const Tensor& x, const TpGroup& tp) {
  check_seq_dim(x, "scatter_seq_to_sp");
  if (trivial(tp)) return x;
  const int64_t p = tp->size(), r = tp->rank(), T = x.size(1);
  ST_CHECK(T % p == 0, ShapeError,
           "scatter_seq_to_sp: sequence length " << T << " of " << x.describe() << " does not divide by tp " << p);
  const int64_t n = T / p;
  Tensor out;
  {
    NoGradGuard ng;
    out = x.detach().narrow(1, r * n, n).contiguous();  // (B, T/tp, ...)
  }
  // backward: dy (B, T/tp, ...) → dx = all-gather along T (B, T, ...)
  attach_grad_fn(out, "scatter_seq_to_sp", {x},
                 [tp](const Tensor& g) { return std::vector<Tensor>{tp_all_gather_seq(g, *tp)}; });
  return out;
}

}  // namespace st::runtime
