// Tensor parallelism's paired autograd functions (Megatron's mappings.py), on st::Tensor over the
// tensor-parallel group `tp` (a comm::Communicator whose ranks hold the shards of one layer):
//
//   copy_to_tp      forward: identity             backward: all-reduce SUM of the gradient
//   reduce_from_tp  forward: all-reduce SUM       backward: identity
//   gather_from_tp  forward: all-gather last dim  backward: this rank's slice of the gradient
//   scatter_to_tp   forward: this rank's slice    backward: all-gather last dim
// and along the SEQUENCE dim (dim 1 of (B, T, ...)) for sequence parallelism (Megatron's form:
// the norm / dropout / residual regions hold rank r's positions [r·T/tp, (r+1)·T/tp)):
//   gather_seq_from_sp        forward: all-gather along T     backward: reduce-scatter along T
//   reduce_scatter_seq_to_sp  forward: reduce-scatter along T backward: all-gather along T
//   scatter_seq_to_sp         forward: this rank's T slice    backward: all-gather along T
// gather_seq_from_sp replaces copy_to_tp before a column-parallel GEMM, reduce_scatter_seq_to_sp
// replaces reduce_from_tp after a row-parallel one (the same bytes on the wire: an all-reduce is a
// reduce-scatter then an all-gather). (B, T) is not sequence-major, so each collective stages a
// permuted contiguous copy ((tp, B, T/tp, ...) blocks), one extra copy of the tensor per call.
//
// copy/reduce are conjugates (so are gather/scatter): a column-parallel linear takes its
// replicated input through copy_to_tp, a row-parallel one returns through reduce_from_tp, and
// between the two no communication is needed. Along the last dim, rank r owns columns
// [r·n, (r+1)·n) of a tp·n wide tensor.
//
// Every collective is issued in the same order on every rank of `tp` (forward in layer order,
// backward in reverse layer order, identical on every rank) and waited for with the
// communicator's deadline (a timeout throws TimeoutError instead of hanging). The functions only
// use contiguous copies, views and the communicator, so they run unchanged on CUDA tensors (NCCL,
// or MPI staging through host memory). Inputs are never modified; results and gradients are fresh
// tensors or views (backward writes =; the autograd engine does the += into leaves).
// A null group or a group of size 1 makes every function the identity.
#pragma once
#include <memory>

#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace st::runtime {

using TpGroup = std::shared_ptr<comm::Communicator>;

// Rank / size of a possibly null group (0 / 1 when null).
int tp_rank(const TpGroup& tp);
int tp_size(const TpGroup& tp);

// x (...) → (...), identical; backward: dx = Σ_ranks dy.
Tensor copy_to_tp(const Tensor& x, const TpGroup& tp);
// x (...) partial sums → (...) Σ_ranks x; backward: dx = dy.
Tensor reduce_from_tp(const Tensor& x, const TpGroup& tp);
// x (..., n) → (..., tp·n), rank r's x at columns [r·n, (r+1)·n); backward: dx = dy[..., r·n:(r+1)·n].
Tensor gather_from_tp(const Tensor& x, const TpGroup& tp);
// x (..., tp·n) → (..., n) = x[..., r·n:(r+1)·n]; backward: dx = all-gather of dy along the last dim.
Tensor scatter_to_tp(const Tensor& x, const TpGroup& tp);

// x (B, T/tp, ...) → (B, T, ...), rank q's x at positions [q·T/tp, (q+1)·T/tp);
// backward: dy (B, T, ...) → dx = Σ_ranks dy[:, r·T/tp:(r+1)·T/tp] (reduce-scatter).
Tensor gather_seq_from_sp(const Tensor& x, const TpGroup& tp);
// x (B, T, ...) partial sums → (B, T/tp, ...) = (Σ_ranks x)[:, r·T/tp:(r+1)·T/tp];
// backward: dy (B, T/tp, ...) → dx = all-gather of dy along T (B, T, ...).
Tensor reduce_scatter_seq_to_sp(const Tensor& x, const TpGroup& tp);
// x (B, T, ...) replicated → (B, T/tp, ...) = x[:, r·T/tp:(r+1)·T/tp]; backward: all-gather along T.
Tensor scatter_seq_to_sp(const Tensor& x, const TpGroup& tp);

// The collectives themselves, outside autograd (fresh, contiguous results; inputs untouched).
Tensor tp_all_reduce_sum(const Tensor& x, comm::Communicator& tp);       // (...) → (...)
Tensor tp_all_reduce_max(const Tensor& x, comm::Communicator& tp);       // (...) → (...)
Tensor tp_all_gather_last_dim(const Tensor& x, comm::Communicator& tp);  // (..., n) → (..., tp·n)
Tensor tp_all_gather_seq(const Tensor& x, comm::Communicator& tp);       // (B, n, ...) → (B, tp·n, ...)
// (B, tp·n, ...) → (B, n, ...) rank r's positions of Σ_ranks x; ShapeError unless T divides by tp
Tensor tp_reduce_scatter_seq(const Tensor& x, comm::Communicator& tp);

}  // namespace st::runtime
