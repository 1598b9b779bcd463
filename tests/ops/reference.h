// Naive double-precision reference forwards for the op harness: plain loops, no cleverness,
// written from the definitions so that they can be trusted.
#pragma once
#include <functional>
#include <vector>

#include "tensor/tensor.h"

namespace st::test::ref {

using Vec = std::vector<double>;

// Broadcast binary op: a of shape sa, b of shape sb.
Vec binary(const Shape& sa, const Vec& a, const Shape& sb, const Vec& b, const std::function<double(double, double)>& f);
// Sum (or mean when `mean`) over `dims` of x (shape s); output flattened in row-major order.
Vec reduce(const Shape& s, const Vec& x, const std::vector<int64_t>& dims, bool mean);
// batch × (op(a) (M,K) · op(b) (K,N)); b shared over the batch when b_shared.
Vec matmul(const Vec& a, const Vec& b, int64_t batch, int64_t M, int64_t N, int64_t K, bool ta, bool tb, bool b_shared);

// GELU (tanh form) and ReLU, elementwise.
Vec gelu(const Vec& x);
Vec relu(const Vec& x);
// Softmax (or log-softmax) over rows of length C.
Vec softmax(const Vec& x, int64_t C, bool log);
// Mean cross-entropy of logits (N, V) against targets (N); rows whose target is `ignore` are
// skipped. Returns one value.
Vec cross_entropy(const Vec& logits, int64_t V, const std::vector<int64_t>& targets, int64_t ignore);
// Layer norm over rows of length C: x (N, C), w (C), b (C).
Vec layernorm(const Vec& x, const Vec& w, const Vec& b, int64_t C, double eps);
// RMS norm over rows of length C: x (N, C), w (C) → w·x/√(mean(x²) + eps).
Vec rmsnorm(const Vec& x, const Vec& w, int64_t C, double eps);
// SiLU x·σ(x), elementwise; SwiGLU of rows [gate | up] of length 2F → silu(gate)·up (rows of F).
Vec silu(const Vec& x);
Vec swiglu(const Vec& gu, int64_t F);
// Row lookup: weight (V, C), idx (N) → (N, C).
Vec embedding(const Vec& weight, int64_t C, const std::vector<int64_t>& idx);
// Causal attention on (B·H) slices of (T, D): softmax(q·kᵀ/√D, masked s ≤ t)·v.
Vec causal_attention(const Vec& q, const Vec& k, const Vec& v, int64_t BH, int64_t T, int64_t D);
// Inverted dropout with the Philox mask of (seed, offset): x_i·[u_i ≥ p]/(1 − p).
Vec dropout(const Vec& x, double p, uint64_t seed, uint64_t offset);

}  // namespace st::test::ref
