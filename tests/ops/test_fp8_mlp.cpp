// ops::fp8_mlp (ops/fp8_mlp.h) on the CPU: the fused node equals the three ops it replaces —
// fp8_linear(act(fp8_linear(x, w_up, b_up)), w_down, b_down) — bit for bit: y, every gradient,
// the six scaling states and the casts' counts, for GELU and SwiGLU, current and delayed scaling
// (two steps with an update between: the second casts with recorded scales), bf16 and f32, both
// weight layouts, with and without biases. What the fusion changes is only where the activation
// and its gradient are computed (tests/gpu/test_gpu_fp8_mlp.cpp holds the CUDA kernels that compute
// them inside the casts to the same bits).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/activation.h"
#include "ops/fp8_linear.h"
#include "ops/fp8_mlp.h"
#include "ops/swiglu.h"
#include "tests/support/fp8_test_util.h"

using namespace st;
using namespace st::ops;
using st::test::normal;
using st::test::bytes;

namespace {

struct MlpCase {
  Fp8MlpAct act;
  Fp8ScaleMode mode;
  DType dt;
  bool biases, out_in;
};

// y, dx, dw_up, db_up, dw_down, db_down of each of two steps, then the six states and two counts
std::vector<std::vector<uint8_t>> run(bool fused, const MlpCase& k) {
  const bool swiglu = k.act == Fp8MlpAct::swiglu;
  const int64_t B = 2, T = 24, C = 32, U = 128, H = swiglu ? U / 2 : U, N = 32;
  auto param = [&](const std::vector<float>& v, int64_t in, int64_t out) {  // (in, out) or (out, in)
    Tensor w = Tensor::from_vector(v, {in, out}).to(k.dt);
    return (k.out_in ? w.transpose(0, 1).contiguous() : w).requires_grad_();
  };
  Tensor x = Tensor::from_vector(normal(B * T * C, 1.f, 1), {B, T, C}).to(k.dt).requires_grad_();
  Tensor wu = param(normal(C * U, 0.2f, 2), C, U), wd = param(normal(H * N, 0.1f, 3), H, N);
  Tensor bu, bd;
  if (k.biases) {
    bu = Tensor::from_vector(normal(U, 0.5f, 4), {U}).to(k.dt).requires_grad_();
    bd = Tensor::from_vector(normal(N, 0.1f, 5), {N}).to(k.dt).requires_grad_();
  }
  const Fp8LinearOptions o{.mode = k.mode, .grad_format = Fp8Format::e4m3, .history = 4};
  Fp8LinearState up = fp8_linear_state(o), down = fp8_linear_state(o);
  up.counts = Tensor::zeros({2}, DType::i64);
  down.counts = Tensor::zeros({2}, DType::i64);
  std::vector<std::vector<uint8_t>> outs;
  for (int step = 0; step < 2; ++step) {
    for (Tensor* p : {&x, &wu, &bu, &wd, &bd})
      if (p->defined()) p->zero_grad(true);
    Tensor y;
    if (fused) {
      y = fp8_mlp(x, {wu, bu, wd, bd, k.out_in}, k.act, up, down);
    } else {
      Tensor pre = fp8_linear(x, wu, bu, up, k.out_in);
      y = fp8_linear(swiglu ? ops::swiglu(pre) : gelu(pre), wd, bd, down, k.out_in);
    }
    EXPECT_EQ(y.shape(), (Shape{B, T, N}));
    y.backward(Tensor::from_vector(normal(B * T * N, 1e-2f * (step + 1), 6 + step), {B, T, N}).to(k.dt));
    outs.push_back(bytes(y.detach()));
    for (Tensor* p : {&x, &wu, &bu, &wd, &bd})
      if (p->defined()) outs.push_back(bytes(p->grad()));
    if (k.mode == Fp8ScaleMode::delayed) {
      fp8_linear_update(up);
      fp8_linear_update(down);
    }
  }
  for (const Fp8LinearState* s : {&up, &down})
    for (const Fp8Scaling* sc : {&s->x, &s->w, &s->grad}) outs.push_back(bytes(sc->state));
  outs.push_back(bytes(up.counts));
  outs.push_back(bytes(down.counts));
  return outs;
}

}  // namespace

TEST(Fp8Mlp, EqualsTheUnfusedOpsBitForBit) {
  for (Fp8MlpAct act : {Fp8MlpAct::gelu, Fp8MlpAct::swiglu})
    for (Fp8ScaleMode mode : {Fp8ScaleMode::current, Fp8ScaleMode::delayed})
      for (DType dt : {DType::bf16, DType::f32})
        for (bool biases : {true, false})
          for (bool out_in : {false, true}) {
            const MlpCase k{act, mode, dt, biases, out_in};
            SCOPED_TRACE(std::string(act == Fp8MlpAct::gelu ? "gelu " : "swiglu ") +
                         (mode == Fp8ScaleMode::delayed ? "delayed " : "current ") + dtype_name(dt) +
                         (biases ? " biases" : " no biases") + (out_in ? " (out, in)" : " (in, out)"));
            const auto fused = run(true, k), unfused = run(false, k);
            ASSERT_EQ(fused.size(), unfused.size());
            for (size_t i = 0; i < fused.size(); ++i) EXPECT_EQ(fused[i], unfused[i]) << "output " << i;
          }
}

TEST(Fp8Mlp, RejectsWeightsThatDoNotChain) {
  Fp8LinearState up = fp8_linear_state({}), down = fp8_linear_state({});
  const Tensor x = Tensor::ones({4, 8}), wu = Tensor::ones({8, 16}), wd = Tensor::ones({16, 8});
  const Fp8MlpAct g = Fp8MlpAct::gelu;
  EXPECT_THROW(fp8_mlp(x, {Tensor::ones({9, 16}), Tensor(), wd, Tensor()}, g, up, down), ShapeError);
  EXPECT_THROW(fp8_mlp(x, {wu, Tensor(), Tensor::ones({15, 8}), Tensor()}, g, up, down), ShapeError);
  EXPECT_THROW(fp8_mlp(x, {wu, Tensor::ones({15}), wd, Tensor()}, g, up, down), ShapeError);
  EXPECT_THROW(fp8_mlp(x, {wu, Tensor(), wd, Tensor::ones({7})}, g, up, down), ShapeError);
  EXPECT_THROW(fp8_mlp(x, {wu, Tensor(), wd, Tensor()}, Fp8MlpAct::swiglu, up, down), ShapeError);  // down takes 8
  EXPECT_THROW(fp8_mlp(x, {wu, Tensor(), wd, Tensor(), true}, g, up, down), ShapeError);  // (in, out) read as (out, in)
}
