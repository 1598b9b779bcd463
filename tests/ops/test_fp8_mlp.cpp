// ops::fp8_mlp_gelu (ops/fp8_mlp.h) on the CPU: the fused node equals the three ops it replaces —
// fp8_linear(gelu(fp8_linear(x, w_up, b_up)), w_down, b_down) — bit for bit: y, every gradient,
// the six scaling states and the casts' counts, for current and delayed scaling (two steps with
// an update between: the second casts with recorded scales), bf16 and f32, with and without
// biases. What the fusion changes is only where the GELU and its gradient are computed
// (tests/gpu/test_gpu_fp8.cpp holds the CUDA kernel that computes them inside the casts to the
// same bits).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/activation.h"
#include "ops/fp8_linear.h"
#include "ops/fp8_mlp.h"

using namespace st;
using namespace st::ops;

namespace {

std::vector<float> normal(size_t n, float std, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.f, std);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

std::vector<uint8_t> bytes(const Tensor& t) {
  Tensor c = t.to(Device::cpu).contiguous();
  std::vector<uint8_t> out(static_cast<size_t>(c.nbytes()));
  std::memcpy(out.data(), c.data_ptr(), out.size());
  return out;
}

struct MlpRun {
  std::vector<std::vector<uint8_t>> outs;  // y, dx, dw_up, db_up, dw_down, db_down of each step, then states, counts
};

MlpRun run(bool fused, Fp8ScaleMode mode, DType dt, bool biases) {
  const int64_t B = 2, T = 24, C = 32, U = 128, N = 32;
  Tensor x = Tensor::from_vector(normal(B * T * C, 1.f, 1), {B, T, C}).to(dt).requires_grad_();
  Tensor wu = Tensor::from_vector(normal(C * U, 0.2f, 2), {C, U}).to(dt).requires_grad_();
  Tensor wd = Tensor::from_vector(normal(U * N, 0.1f, 3), {U, N}).to(dt).requires_grad_();
  Tensor bu, bd;
  if (biases) {
    bu = Tensor::from_vector(normal(U, 0.5f, 4), {U}).to(dt).requires_grad_();
    bd = Tensor::from_vector(normal(N, 0.1f, 5), {N}).to(dt).requires_grad_();
  }
  const Fp8LinearOptions o{.mode = mode, .grad_format = Fp8Format::e4m3, .history = 4};
  Fp8LinearState up = fp8_linear_state(o), down = fp8_linear_state(o);
  up.counts = Tensor::zeros({2}, DType::i64);
  down.counts = Tensor::zeros({2}, DType::i64);
  MlpRun r;
  for (int step = 0; step < 2; ++step) {
    for (Tensor* p : {&x, &wu, &bu, &wd, &bd})
      if (p->defined()) p->zero_grad(true);
    Tensor y = fused ? fp8_mlp_gelu(x, wu, bu, wd, bd, up, down)
                     : fp8_linear(gelu(fp8_linear(x, wu, bu, up)), wd, bd, down);
    EXPECT_EQ(y.shape(), (Shape{B, T, N}));
    y.backward(Tensor::from_vector(normal(B * T * N, 1e-2f * (step + 1), 6 + step), {B, T, N}).to(dt));
    r.outs.push_back(bytes(y.detach()));
    for (Tensor* p : {&x, &wu, &bu, &wd, &bd})
      if (p->defined()) r.outs.push_back(bytes(p->grad()));
    if (mode == Fp8ScaleMode::delayed) {
      fp8_linear_update(up);
      fp8_linear_update(down);
    }
  }
  for (const Fp8LinearState* s : {&up, &down})
    for (const Fp8Scaling* sc : {&s->x, &s->w, &s->grad}) r.outs.push_back(bytes(sc->state));
  r.outs.push_back(bytes(up.counts));
  r.outs.push_back(bytes(down.counts));
  return r;
}

}  // namespace

TEST(Fp8MlpGelu, EqualsTheUnfusedOpsBitForBit) {
  for (Fp8ScaleMode mode : {Fp8ScaleMode::current, Fp8ScaleMode::delayed})
    for (DType dt : {DType::bf16, DType::f32})
      for (bool biases : {true, false}) {
        SCOPED_TRACE(std::string(mode == Fp8ScaleMode::delayed ? "delayed " : "current ") + dtype_name(dt) +
                     (biases ? " biases" : " no biases"));
        const MlpRun fused = run(true, mode, dt, biases), unfused = run(false, mode, dt, biases);
        ASSERT_EQ(fused.outs.size(), unfused.outs.size());
        for (size_t i = 0; i < fused.outs.size(); ++i) EXPECT_EQ(fused.outs[i], unfused.outs[i]) << "output " << i;
      }
}

TEST(Fp8MlpGelu, RejectsMismatchedShapes) {
  Fp8LinearState up = fp8_linear_state({}), down = fp8_linear_state({});
  const Tensor x = Tensor::ones({4, 8}), wu = Tensor::ones({8, 16}), wd = Tensor::ones({16, 8});
  EXPECT_THROW(fp8_mlp_gelu(x, Tensor::ones({9, 16}), Tensor(), wd, Tensor(), up, down), ShapeError);
  EXPECT_THROW(fp8_mlp_gelu(x, wu, Tensor(), Tensor::ones({15, 8}), Tensor(), up, down), ShapeError);
  EXPECT_THROW(fp8_mlp_gelu(x, wu, Tensor::ones({15}), wd, Tensor(), up, down), ShapeError);
  EXPECT_THROW(fp8_mlp_gelu(x, wu, Tensor(), wd, Tensor::ones({7}), up, down), ShapeError);
}
