// Sequence parallelism's linears as single autograd nodes (Megatron's
// LinearWithGradAccumulationAndAsyncCommunication under sequence_parallel): the collective along T
// and the GEMM are one node, so the (B, T, ·) tensor on the far side of the collective is not kept
// for the backward — the autograd engine keeps every node's inputs (tensor/autograd.h), so with
// gather_seq_from_sp → linear the gathered input stayed alive until the weight gradient, and with
// linear → reduce_scatter_seq_to_sp the GEMM's partial sums did.
//
//   sp_column_linear(x, w, b)   x (B, T/tp, K) this rank's positions [r·T/tp, (r+1)·T/tp)
//     forward:  X = all-gather of x along T (B, T, K);  y = X·w + b (B, T, N); X freed
//     keeps:    x (the T-shard: 1/tp of X) and w
//     backward: g (B, T, N) →
//               1. the all-gather of x along T started again (asynchronous)
//               2. dX = g·wᵀ (B, T, K) while it runs; dX's reduce-scatter along T started
//               3. the gather waited for: dW = Xᵀ·g (w's shape), db = Σ_rows g (N), X freed
//               4. dx = the reduce-scatter's result (B, T/tp, K), this rank's rows of Σ_ranks dX
//   sp_row_linear(x, w)         x (B, T, K/tp) → x·w (B, T, N) partial sums → reduce-scatter along T
//                               → y (B, T/tp, N); the partial sums freed
//     keeps:    x and w (x is kept by the op before it anyway: GELU's / the attention's output)
//     backward: g (B, T/tp, N) → G = all-gather along T (B, T, N); dx = G·wᵀ, dW = xᵀ·G
//
// w is (K, N), or (N, K) when out_in (nn.Linear's layout: y = x·wᵀ); b (N) or undefined. The
// products are ops::linear's / ops::linear_nt's (runtime::local_linear without FP8: the same kernels,
// and in backward the same GEMMs and bias reduction as their autograd nodes), so the results equal
// gather_seq_from_sp → local_linear (and local_linear → reduce_scatter_seq_to_sp) bit for bit; only
// what is kept between forward and backward changes, and the backward's peak gains the re-gathered
// X (B, T, K) beside dX while one column linear's backward runs. On NCCL the gather and the
// reduce-scatter run on the communicator's stream beside the GEMMs (the overlap); on MPI they
// progress when waited for. Both are issued in the same order on every rank (the node's backward
// runs at the same place of every rank's identical graph). Not here: FP8 (runtime::column_linear
// keeps the separate gather_seq_from_sp / reduce_scatter_seq_to_sp nodes around ops::fp8_linear,
// whose E4M3 casts would have to be redone on the re-gathered X: under --precision fp8 the
// gathered inputs and partial sums are still kept) and a group of one rank (no split): both
// functions require tp ≥ 2 (ValueError otherwise) and T divisible by tp (ShapeError).
#pragma once
#include "runtime/parallel/tensor_parallel.h"

namespace st::runtime {

// x (B, T/tp, K) → (B, T, N)
Tensor sp_column_linear(const Tensor& x, const Tensor& w, const Tensor& b, bool out_in, const TpGroup& tp);
// x (B, T, K/tp) → (B, T/tp, N), Σ over tp of the partial products at this rank's positions (no bias)
Tensor sp_row_linear(const Tensor& x, const Tensor& w, bool out_in, const TpGroup& tp);

}  // namespace st::runtime
