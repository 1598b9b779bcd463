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

}  // namespace st::runtime
