// Fused cuBLASLt epilogues (ops/cuda/gemm_lt.cu) through the ops that use them: linear with a bias
// (bias epilogue; bias gradient in the weight-gradient GEMM) and the GPT MLP mlp_gelu (bias +
// GELU epilogue saving the pre-activation, bias epilogue; db2 in dW2's GEMM). Against the CPU ops in f32 / f16 / bf16, forward and backward, aligned (GPT-like) and
// odd sizes, and a check that the fused kernels really ran for the aligned half-precision cases.
#include "ops/matmul.h"
#include "ops/mlp.h"
#include "tests/gpu/gpu_cases.h"

using namespace st;
using namespace st::test;
using ops::cuda::LtEpilogue;

namespace {
int64_t launches(LtEpilogue e) { return ops::cuda::gemm_lt_launches(e); }
}  // namespace

TEST(GpuGemmLt, LinearWithBias) {
  const int64_t bias0 = launches(LtEpilogue::bias), grad0 = launches(LtEpilogue::bgrad_b);
  check_gpu({.name = "linear (4, 100, 64)·(64, 96) + b", .shapes = {{4, 100, 64}, {64, 96}, {96}},
             .op = [](auto& x) { return ops::linear(x[0], x[1], x[2]); }});
  EXPECT_GT(launches(LtEpilogue::bias), bias0) << "the bias epilogue never ran";
  EXPECT_GT(launches(LtEpilogue::bgrad_b), grad0) << "the bias-gradient epilogue never ran";
  check_gpu({.name = "linear odd (1000, 257)·(257, 33) + b", .shapes = {{1000, 257}, {257, 33}, {33}},
             .op = [](auto& x) { return ops::linear(x[0], x[1], x[2]); }});
  check_gpu({.name = "linear (3, 5, 16)·(16, 8) + b", .shapes = {{3, 5, 16}, {16, 8}, {8}},
             .op = [](auto& x) { return ops::linear(x[0], x[1], x[2]); }});
}

TEST(GpuGemmLt, MlpGelu) {
  const int64_t gelu0 = launches(LtEpilogue::gelu_bias), grad0 = launches(LtEpilogue::bgrad_b);
  check_gpu({.name = "mlp (2, 50, 64) → 256 → 64",
             .shapes = {{2, 50, 64}, {64, 256}, {256}, {256, 64}, {64}},
             .op = [](auto& x) { return ops::mlp_gelu(x[0], x[1], x[2], x[3], x[4]); },
             .lo = -2, .hi = 2});
  EXPECT_GT(launches(LtEpilogue::gelu_bias), gelu0) << "the GELU epilogue never ran";
  EXPECT_GT(launches(LtEpilogue::bgrad_b), grad0) << "the bias-gradient epilogue never ran in the MLP";
  check_gpu({.name = "mlp odd (3, 7, 40) → 160 → 24",
             .shapes = {{3, 7, 40}, {40, 160}, {160}, {160, 24}, {24}},
             .op = [](auto& x) { return ops::mlp_gelu(x[0], x[1], x[2], x[3], x[4]); }});
  check_gpu({.name = "mlp (1000, 36) → 72 → 36 (F % 8 = 0, C odd-ish)",
             .shapes = {{1000, 36}, {36, 72}, {72}, {72, 36}, {36}},
             .op = [](auto& x) { return ops::mlp_gelu(x[0], x[1], x[2], x[3], x[4]); }});
}
