// Helpers for the tensor-parallel tests: the world communicator, random tensors that are the same
// on every rank (Philox with a fixed seed), fresh leaves, and a normwise closeness check
// (max |got − want| ≤ rtol · max |want|, the "1e-5 relative" of the TP acceptance criteria).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "comm/make_communicator.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "runtime/parallel/tensor_parallel.h"
#include "tests/support/test_comm_options.h"
#include "tensor/rng.h"
#include "tensor/tensor.h"

namespace st::tptest {

inline std::shared_ptr<comm::Communicator> world() {
  static std::shared_ptr<comm::Communicator> w =
      comm::make_communicator("mpi", std::chrono::seconds(60), testing_support::test_comm_options()).world;
  return w;
}

// The world as the tensor-parallel group of the tp tests (tp = the world size), its size and rank.
inline runtime::TpGroup tp() { return world(); }
inline int P() { return runtime::tp_size(tp()); }
inline int R() { return runtime::tp_rank(tp()); }

// Σ y·g: a scalar loss whose gradient with respect to y is g.
inline Tensor dot(const Tensor& y, const Tensor& g) { return ops::sum(ops::mul(y, g)); }

// normal(0, std) values, identical on every rank for the same seed.
inline Tensor randn(const Shape& shape, uint64_t seed, float std = 1.f) {
  Tensor t = Tensor::empty(shape);
  Generator g(seed);
  fill_normal(t, g, 0.f, std);
  return t;
}

// A fresh leaf that requires grad, holding a copy of t.
inline Tensor leaf(const Tensor& t) {
  Tensor l = t.detach().clone();
  l.requires_grad_(true);
  return l;
}

inline ::testing::AssertionResult close_rel(const Tensor& got, const Tensor& want, double rtol) {
  if (!got.defined() || !want.defined()) return ::testing::AssertionFailure() << "undefined tensor";
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(got.shape()) << " vs " << shape_str(want.shape());
  std::vector<double> a = got.to_double(), b = want.to_double();
  double scale = 0, err = 0;
  size_t worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::fabs(b[i]));
    double e = std::fabs(a[i] - b[i]);
    if (!(e <= err)) {  // NaN counts as the worst
      err = std::isnan(e) ? INFINITY : e;
      worst = i;
    }
  }
  if (scale == 0) scale = 1;
  if (err <= rtol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max error " << err << " at " << worst << " (got " << a[worst] << ", want "
                                       << b[worst] << ") exceeds " << rtol << " · max|want| " << scale;
}

inline ::testing::AssertionResult exactly_equal(const Tensor& got, const Tensor& want) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(got.shape()) << " vs " << shape_str(want.shape());
  if (got.dtype() != want.dtype()) return ::testing::AssertionFailure() << got.describe() << " vs " << want.describe();
  std::vector<double> a = got.to_double(), b = want.to_double();
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

}  // namespace st::tptest
