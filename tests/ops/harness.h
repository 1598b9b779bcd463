// One op-test harness for every op (docs/style.md, rule 8). A case names the op, its input shapes, how to
// call it, and a naive double-precision reference forward. check_op then verifies:
//   1. f32 forward against the reference:          |out − ref| ≤ atol + rtol·|ref|
//   2. f32 backward against central finite differences of the *reference* in double, projected
//      on a random cotangent u (L = Σ u·f(x)), so the check has no f32 noise of its own;
//   3. f16 and bf16 forward and backward on the same (rounded) inputs, by relative norm error.
// Adding an op = adding one OpCase. Inputs are drawn fresh from a Philox stream per case.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace st::test {

using RefFn = std::function<std::vector<double>(const std::vector<std::vector<double>>& inputs)>;
using OpFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

struct OpCase {
  std::string name;
  std::vector<Shape> shapes;     // floating inputs, drawn uniformly from [lo, hi)
  OpFn op;                       // calls the op; constants (indices, targets) are captured
  RefFn ref;                     // double-precision forward, flattened output
  std::vector<bool> grad = {};   // which inputs get a gradient check (default: all)
  float lo = -1.f, hi = 1.f;
  double atol = 1e-5, rtol = 1e-4;            // f32 forward
  double grad_atol = 2e-4, grad_rtol = 2e-3;  // f32 backward vs finite differences
  double fd_h = 1e-5;                         // finite-difference step (double)
  double f16_tol = 5e-3, bf16_tol = 3e-2;     // relative norm error, forward and backward
  bool low_precision = true;                  // run the f16 / bf16 checks
  uint64_t seed = 1;
};

// Runs all checks on the CPU; reports through GoogleTest assertions.
void check_op(const OpCase& c);

// Runs the op on `device` in `dtype` and compares forward and backward with the CPU f32 op on
// the same inputs (relative norm error ≤ tol). For the gpu-labelled tests.
void check_op_against_cpu(const OpCase& c, Device device, DType dtype, double tol);

// Relative norm error ‖a − b‖ / max(‖b‖, tiny).
double rel_err(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace st::test
