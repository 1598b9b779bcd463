// CUDA elementwise, reductions and GEMM against the CPU ops: f32 / f16 / bf16, forward and
// backward, broadcasting, every transpose, batched and shared-weight products, sizes that are
// not multiples of any tile (257, 1000, 65).
#include "ops/cuda/gemm_config.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "tests/gpu/gpu_cases.h"

using namespace st;
using namespace st::test;

TEST(GpuOps, BinaryWithBroadcast) {
  check_gpu({.name = "add (1000,257)+(257)", .shapes = {{1000, 257}, {257}},
             .op = [](auto& x) { return ops::add(x[0], x[1]); }});
  check_gpu({.name = "sub (3,1,257)-(5,1)", .shapes = {{3, 1, 257}, {5, 1}},
             .op = [](auto& x) { return ops::sub(x[0], x[1]); }});
  check_gpu({.name = "mul (7,33)*(7,33)", .shapes = {{7, 33}, {7, 33}},
             .op = [](auto& x) { return ops::mul(x[0], x[1]); }});
  check_gpu({.name = "div (9,257)/(9,1)", .shapes = {{9, 257}, {9, 1}},
             .op = [](auto& x) { return ops::div(x[0], x[1]); }, .lo = 0.5f, .hi = 2.f});
  check_gpu({.name = "scale", .shapes = {{1000, 257}}, .op = [](auto& x) { return ops::scale(x[0], -1.75); }});
}

TEST(GpuOps, BinaryOnStridedViews) {
  check_gpu({.name = "add of a transpose", .shapes = {{257, 31}, {31, 257}},
             .op = [](auto& x) { return ops::add(x[0].transpose(0, 1), x[1]); }});
}

TEST(GpuOps, Reductions) {
  check_gpu({.name = "sum dims {0,2}", .shapes = {{5, 257, 9}}, .op = [](auto& x) { return ops::sum(x[0], {0, 2}); }});
  check_gpu({.name = "sum all", .shapes = {{1000, 257}}, .op = [](auto& x) { return ops::sum(x[0]); }},
            {.f32 = 1e-5, .f16 = 1e-2, .bf16 = 4e-2});
  check_gpu({.name = "mean last keepdim", .shapes = {{1000, 257}},
             .op = [](auto& x) { return ops::mean(x[0], {-1}, true); }});
  check_gpu({.name = "sum of a transposed view", .shapes = {{33, 65}},
             .op = [](auto& x) { return ops::sum(x[0].transpose(0, 1), {1}); }});
}

TEST(GpuOps, MatmulEveryTransposeAndBatch) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Shape sa = ta ? Shape{3, 65, 257} : Shape{3, 257, 65}, sb = tb ? Shape{3, 130, 65} : Shape{3, 65, 130};
      check_gpu({.name = std::string("batched matmul ta=") + (ta ? "1" : "0") + " tb=" + (tb ? "1" : "0"),
                 .shapes = {sa, sb},
                 .op = [ta, tb](auto& x) { return ops::matmul(x[0], x[1], ta, tb); }});
    }
  check_gpu({.name = "shared 2-d weight", .shapes = {{2, 100, 65}, {65, 33}},
             .op = [](auto& x) { return ops::matmul(x[0], x[1]); }});
  check_gpu({.name = "linear with bias", .shapes = {{4, 250, 257}, {257, 96}, {96}},
             .op = [](auto& x) { return ops::linear(x[0], x[1], x[2]); }});
}

TEST(GpuOps, MatmulTf32IsOptInAndClose) {
  ASSERT_FALSE(ops::cuda::gemm_allow_tf32());
  ops::cuda::set_gemm_allow_tf32(true);
  check_op_against_cpu({.name = "tf32 matmul", .shapes = {{512, 257}, {257, 300}},
                        .op = [](auto& x) { return ops::matmul(x[0], x[1]); }},
                       Device::cuda, DType::f32, 3e-3);
  ops::cuda::set_gemm_allow_tf32(false);
}
