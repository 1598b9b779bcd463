// CUDA elementwise, reductions and GEMM against the CPU ops: f32 / f16 / bf16, forward and
// backward, broadcasting, every transpose, batched and shared-weight products, sizes that are
// not multiples of any tile (257, 1000, 65). The bias add (row broadcast) and its gradient (the
// column sum) run on aligned shapes (16384×768, 4×3×2304: 16-byte packs) and on odd shapes or
// views at an odd element offset (the scalar fallbacks).
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

namespace {
Tensor binary(int op, const Tensor& a, const Tensor& b) {
  switch (op) {
    case 0: return ops::add(a, b);
    case 1: return ops::sub(a, b);
    case 2: return ops::mul(a, b);
    default: return ops::div(a, b);
  }
}
const char* const kOpNames[] = {"add", "sub", "mul", "div"};
// x (1-d, n + 1 elements) → the (rows, cols...) view that starts one element in: contiguous, not
// 16-byte aligned for any dtype.
Tensor shifted(const Tensor& x, const Shape& shape) { return x.narrow(0, 1, x.numel() - 1).view(shape); }
}  // namespace

TEST(GpuOps, BiasAddEveryOpBothOrders) {
  // full ∘ bias and bias ∘ full; backward sums the bias gradient over the leading dims
  const std::pair<Shape, Shape> shapes[] = {{{1000, 257}, {257}}, {{4, 3, 2304}, {2304}}, {{16384, 768}, {768}}};
  for (const auto& [full, bias] : shapes)
    for (int op = 0; op < 4; ++op) {
      const bool big = full[0] == 16384;
      if (big && op == 1) continue;  // sub is add's kernel with another functor: small shapes suffice
      const float lo = op == 3 ? 0.5f : -1.f, hi = op == 3 ? 2.f : 1.f;
      const std::string name = std::string(kOpNames[op]) + " " + shape_str(full) + " ∘ " + shape_str(bias);
      check_gpu({.name = name, .shapes = {full, bias},
                 .op = [op](auto& x) { return binary(op, x[0], x[1]); }, .lo = lo, .hi = hi});
      check_gpu({.name = "reversed " + name, .shapes = {bias, full},
                 .op = [op](auto& x) { return binary(op, x[0], x[1]); }, .lo = lo, .hi = hi});
    }
}

TEST(GpuOps, BiasAddOnMisalignedViews) {
  // operand, bias or both one element into their storage: the scalar row-broadcast path
  for (int64_t N : {768, 257}) {
    const int64_t M = N == 768 ? 16384 : 1000;
    const std::string sz = " (" + std::to_string(M) + "," + std::to_string(N) + ")";
    check_gpu({.name = "add shifted x" + sz, .shapes = {{M * N + 1}, {N}},
               .op = [M, N](auto& x) { return ops::add(shifted(x[0], {M, N}), x[1]); }});
    check_gpu({.name = "mul shifted bias" + sz, .shapes = {{M, N}, {N + 1}},
               .op = [N](auto& x) { return ops::mul(x[0], shifted(x[1], {N})); }});
    check_gpu({.name = "div bias by shifted x" + sz, .shapes = {{N}, {M * N + 1}},
               .op = [M, N](auto& x) { return ops::div(x[0], shifted(x[1], {M, N})); }, .lo = 0.5f, .hi = 2.f});
  }
  check_gpu({.name = "same-shape add, both shifted", .shapes = {{16384 * 768 + 1}, {16384 * 768 + 1}},
             .op = [](auto& x) { return ops::add(shifted(x[0], {16384, 768}), shifted(x[1], {16384, 768})); }});
  check_gpu({.name = "same-shape mul (16384,768)", .shapes = {{16384, 768}, {16384, 768}},
             .op = [](auto& x) { return ops::mul(x[0], x[1]); }});
  check_gpu({.name = "add of a bias row at an odd offset (1,257)", .shapes = {{1000, 257}, {2, 257}},
             .op = [](auto& x) { return ops::add(x[0], x[1].narrow(0, 1, 1).view({1, 257})); }});
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

TEST(GpuOps, ColumnSumsOverLeadingDims) {
  // contiguous x with the leading dims reduced: the column-sum path (packs when aligned)
  check_gpu({.name = "sum dim 0 (1000,257)", .shapes = {{1000, 257}}, .op = [](auto& x) { return ops::sum(x[0], {0}); }});
  check_gpu({.name = "sum dim 0 (16384,768)", .shapes = {{16384, 768}},
             .op = [](auto& x) { return ops::sum(x[0], {0}); }});
  check_gpu({.name = "sum dims {0,1} (4,3,2304)", .shapes = {{4, 3, 2304}},
             .op = [](auto& x) { return ops::sum(x[0], {0, 1}); }});
  check_gpu({.name = "sum dims {0,1} keepdim (5,7,257)", .shapes = {{5, 7, 257}},
             .op = [](auto& x) { return ops::sum(x[0], {0, 1}, true); }});
  check_gpu({.name = "sum dim 0 (1,4,2304) with a size-1 lead", .shapes = {{1, 4, 2304}},
             .op = [](auto& x) { return ops::sum(x[0], {0, 1}); }});
  check_gpu({.name = "sum dim 0 (16384,3)", .shapes = {{16384, 3}}, .op = [](auto& x) { return ops::sum(x[0], {0}); }});
  check_gpu({.name = "mean dim 0 (16384,768)", .shapes = {{16384, 768}},
             .op = [](auto& x) { return ops::mean(x[0], {0}); }});
  // misaligned contiguous views: the scalar column-sum path
  check_gpu({.name = "sum dim 0 of a shifted (16384,768)", .shapes = {{16384 * 768 + 1}},
             .op = [](auto& x) { return ops::sum(shifted(x[0], {16384, 768}), {0}); }});
  check_gpu({.name = "sum dims {0,1} of a shifted (4,3,2304)", .shapes = {{4 * 3 * 2304 + 1}},
             .op = [](auto& x) { return ops::sum(shifted(x[0], {4, 3, 2304}), {0, 1}); }});
  // not contiguous: the general kernel
  check_gpu({.name = "sum dim 0 of a narrowed (1000,258)", .shapes = {{1000, 258}},
             .op = [](auto& x) { return ops::sum(x[0].narrow(1, 1, 257), {0}); }});
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
