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

}  // namespace st::test::ref
