// CUDA network ops against the CPU ops: activations, dropout (same mask), softmax, fused
// cross-entropy (ignore_index, out-of-range target), layernorm, embedding (repeated indices,
// bad index), causal attention (T = 1000, D = 64 and an odd D). f32 / f16 / bf16, fwd and bwd.
// The MLP's fused GELU gradient + column sum against the CPU.
// Layernorm backward runs on both its fused kernel (every lane width up to C = 1024) and the
// separate dx / dw-db kernels (C > 1024, misaligned x), and its fused gradients are bit-stable.
#include <string>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layernorm.h"
#include "ops/reduce.h"
#include "ops/softmax.h"
#include "tests/gpu/gpu_cases.h"

using namespace st;
using namespace st::test;

namespace {
Tensor targets_for(int64_t n, int64_t V, int64_t ignore_every, DType dt) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = (ignore_every && i % ignore_every == 3) ? -100 : (i * 7919 + 13) % V;
  return Tensor::from_vector(t, {n}).to(dt);
}
}  // namespace

TEST(GpuOpsNN, Activations) {
  check_gpu({.name = "gelu", .shapes = {{1000, 257}}, .op = [](auto& x) { return ops::gelu(x[0]); }, .lo = -4, .hi = 4});
  check_gpu({.name = "relu", .shapes = {{1000, 257}}, .op = [](auto& x) { return ops::relu(x[0]); }});
  check_gpu({.name = "gelu odd size", .shapes = {{13}}, .op = [](auto& x) { return ops::gelu(x[0]); }});
}

TEST(GpuOpsNN, DropoutDrawsTheCpuMask) {
  check_gpu({.name = "dropout p=0.3", .shapes = {{1000, 257}}, .op = [](auto& x) {
               Generator g(99, 12345);
               return ops::dropout(x[0], 0.3f, g, true);
             }},
            {.f32 = 0, .f16 = 1e-2, .bf16 = 4e-2});
  // the seed read by the kernel from device memory (a graph step's seed table), at an offset
  // that splits a Philox block (3 mod 4): the CPU's mask
  check_gpu({.name = "dropout, seed in a tensor, offset 3", .shapes = {{1000, 257}}, .op = [](auto& x) {
               const Tensor seed = Tensor::from_vector(std::vector<int64_t>{0x5EEDC0DE1234567LL}, {1}).to(x[0].device());
               return ops::dropout(x[0], 0.3f, seed, 3, true);
             }},
            {.f32 = 0, .f16 = 1e-2, .bf16 = 4e-2});
}

TEST(GpuOpsNN, Softmax) {
  check_gpu({.name = "softmax", .shapes = {{3, 333, 257}}, .op = [](auto& x) { return ops::softmax(x[0]); }, .lo = -5, .hi = 5});
  check_gpu({.name = "log_softmax", .shapes = {{77, 1000}}, .op = [](auto& x) { return ops::log_softmax(x[0]); },
             .lo = -5, .hi = 5});
}

TEST(GpuOpsNN, CrossEntropyWithIgnoredRows) {
  for (DType it : {DType::i32, DType::i64}) {
    Tensor t = targets_for(4 * 250, 1000, 17, it).view({4, 250});
    check_gpu({.name = std::string("cross_entropy V=1000 targets ") + dtype_name(it), .shapes = {{4, 250, 1000}},
               .op = [t](auto& x) { return ops::cross_entropy(x[0], t.to(x[0].device())); }, .lo = -4, .hi = 4});
  }
  Tensor t2 = targets_for(50, 50257, 0, DType::i64);
  check_gpu({.name = "cross_entropy GPT-2 vocabulary", .shapes = {{50, 50257}},
             .op = [t2](auto& x) { return ops::cross_entropy(x[0], t2.to(x[0].device())); }, .lo = -2, .hi = 2});
}

TEST(GpuOpsNN, CrossEntropyRejectsAnOutOfRangeTarget) {
  Tensor logits = Tensor::zeros({4, 10}, DType::f32, Device::cuda);
  Tensor t = Tensor::from_vector(std::vector<int64_t>{1, 2, 10, 3}, {4}, Device::cuda);
  try {
    ops::cross_entropy(logits, t);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("target 10 at position 2"), std::string::npos) << e.what();
  }
}

TEST(GpuOpsNN, Layernorm) {
  check_gpu({.name = "layernorm C=257", .shapes = {{3, 333, 257}, {257}, {257}},
             .op = [](auto& x) { return ops::layernorm(x[0], x[1], x[2]); }});
  check_gpu({.name = "layernorm C=768 many rows", .shapes = {{4, 1000, 768}, {768}, {768}},
             .op = [](auto& x) { return ops::layernorm(x[0], x[1], x[2]); }});
}

TEST(GpuOpsNN, LayernormBackwardFusedAndFallbackShapes) {
  // fused dx + dw/db and the register-resident forward (rows of whole packs, C ≤ 1024): every
  // lane width, partial last slices, fewer rows than warps; C > 1024 and misaligned x take the
  // separate (looping) kernels
  for (int64_t C : {64, 200, 512, 768, 1024, 1032}) {
    const int64_t N = C == 768 ? 16384 : 333;
    check_gpu({.name = "layernorm (" + std::to_string(N) + "," + std::to_string(C) + ")", .shapes = {{N, C}, {C}, {C}},
               .op = [](auto& x) { return ops::layernorm(x[0], x[1], x[2]); }});
  }
  check_gpu({.name = "layernorm 5 rows C=768", .shapes = {{5, 768}, {768}, {768}},
             .op = [](auto& x) { return ops::layernorm(x[0], x[1], x[2]); }});
  check_gpu({.name = "layernorm of a shifted x C=768", .shapes = {{1000 * 768 + 1}, {768}, {768}},
             .op = [](auto& x) {
               return ops::layernorm(x[0].narrow(0, 1, 1000 * 768).view({1000, 768}), x[1], x[2]);
             }});
}

TEST(GpuOpsNN, GeluGradSummedAsItIsComputed) {
  // the MLP backward's fused pass: dx against the CPU's GELU gradient, col_sum against the column
  // sum of the dx it wrote (bit for bit: same values, same order), on aligned and odd widths and a
  // misaligned dy (scalar path)
  struct Case {
    int64_t M, N, dy_offset;
  };
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (Case c : {Case{1000, 3072, 0}, Case{333, 257, 0}, Case{16384, 768, 0}, Case{77, 3072, 1}, Case{3, 64, 0}}) {
      Generator g(11);
      Tensor x = Tensor::empty({c.M, c.N}, dt, Device::cuda);
      Tensor dy_buf = Tensor::empty({c.M * c.N + c.dy_offset}, dt, Device::cuda);
      fill_uniform(x, g, -4.f, 4.f);
      fill_uniform(dy_buf, g);
      Tensor dy = dy_buf.narrow(0, c.dy_offset, c.M * c.N).view({c.M, c.N});
      Tensor dx = Tensor::empty({c.M, c.N}, dt, Device::cuda), col = Tensor::empty({c.N}, dt, Device::cuda);
      ops::cuda::gelu_bwd_sum_cols(x, dy, dx, col);
      const std::string what = std::string(dtype_name(dt)) + " (" + std::to_string(c.M) + ", " + std::to_string(c.N) +
                               ") dy offset " + std::to_string(c.dy_offset);
      EXPECT_EQ(col.to_double(), ops::sum(dx, {0}).to_double()) << what;
      Tensor ref = Tensor::empty({c.M, c.N}, DType::f32, Device::cpu);  // f32 CPU gradient of the same inputs
      ops::cpu::gelu_bwd(x.to(Device::cpu).to(DType::f32), dy.to(Device::cpu).to(DType::f32), ref);
      // relative error of the whole tensor (the gpu tests' measure): dx is rounded to dt, and in
      // f32 the CPU's and CUDA's tanh differ by ulps where 1 + tanh cancels (x near −4)
      const double tol = dt == DType::f32 ? 1e-5 : dt == DType::f16 ? 2e-3 : 1.6e-2;
      EXPECT_LE(rel_err(dx.to_double(), ref.to_double()), tol) << what;
    }
}

TEST(GpuOpsNN, LayernormWeightGradIsDeterministic) {
  Generator g(3);
  Tensor x = Tensor::empty({2000, 257}, DType::f32, Device::cuda), w = Tensor::empty({257}, DType::f32, Device::cuda),
         b = Tensor::empty({257}, DType::f32, Device::cuda);
  fill_uniform(x, g);
  fill_uniform(w, g);
  fill_uniform(b, g);
  std::vector<double> first;
  for (int rep = 0; rep < 3; ++rep) {
    Tensor wr = w.detach().requires_grad_();
    ops::sum(ops::layernorm(x, wr, b)).backward();
    if (rep == 0) first = wr.grad().to_double();
    else EXPECT_EQ(wr.grad().to_double(), first);
  }
}

TEST(GpuOpsNN, LayernormFusedBackwardIsDeterministic) {
  for (DType dt : {DType::f16, DType::f32}) {
    Generator g(5);
    Tensor x = Tensor::empty({16384, 768}, dt, Device::cuda), w = Tensor::empty({768}, dt, Device::cuda),
           b = Tensor::empty({768}, dt, Device::cuda), u = Tensor::empty({16384, 768}, dt, Device::cuda);
    for (Tensor* t : {&x, &w, &b, &u}) fill_uniform(*t, g);
    std::vector<double> first[3];
    for (int rep = 0; rep < 3; ++rep) {
      Tensor xr = x.detach().requires_grad_(), wr = w.detach().requires_grad_(), br = b.detach().requires_grad_();
      ops::sum(ops::mul(ops::layernorm(xr, wr, br), u)).backward();
      std::vector<double> now[3] = {xr.grad().to_double(), wr.grad().to_double(), br.grad().to_double()};
      for (int k = 0; k < 3; ++k) {
        if (rep == 0) first[k] = now[k];
        else EXPECT_EQ(now[k], first[k]) << dtype_name(dt) << " gradient " << k << " rep " << rep;
      }
    }
  }
}

TEST(GpuOpsNN, EmbeddingRepeatedIndices) {
  std::vector<int64_t> ids(7 * 100);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * i + 3) % 97);  // many repeats
  Tensor idx = Tensor::from_vector(ids, {7, 100});
  check_gpu({.name = "embedding (500,257)", .shapes = {{500, 257}},
             .op = [idx](auto& x) { return ops::embedding(x[0], idx.to(x[0].device())); }});
  Tensor w = Tensor::zeros({10, 4}, DType::f32, Device::cuda);
  try {
    ops::embedding(w, Tensor::from_vector(std::vector<int32_t>{1, -1}, {2}, Device::cuda));
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("index -1 at position 1"), std::string::npos) << e.what();
  }
}

TEST(GpuOpsNN, CausalAttention) {
  check_gpu({.name = "attention T=1000 D=64", .shapes = {{1, 2, 1000, 64}, {1, 2, 1000, 64}, {1, 2, 1000, 64}},
             .op = [](auto& x) { return ops::causal_attention(x[0], x[1], x[2]); }},
            {.f32 = 1e-5, .f16 = 1e-2, .bf16 = 4e-2});
  check_gpu({.name = "attention T=17 D=64 (one partial tile)", .shapes = {{3, 1, 17, 64}, {3, 1, 17, 64}, {3, 1, 17, 64}},
             .op = [](auto& x) { return ops::causal_attention(x[0], x[1], x[2]); }, .lo = -3, .hi = 3});
  check_gpu({.name = "attention T=77 D=40", .shapes = {{2, 3, 77, 40}, {2, 3, 77, 40}, {2, 3, 77, 40}},
             .op = [](auto& x) { return ops::causal_attention(x[0], x[1], x[2]); }, .lo = -2, .hi = 2});
  check_gpu({.name = "attention T=130 D=128", .shapes = {{1, 1, 130, 128}, {1, 1, 130, 128}, {1, 1, 130, 128}},
             .op = [](auto& x) { return ops::causal_attention(x[0], x[1], x[2]); }});
}
