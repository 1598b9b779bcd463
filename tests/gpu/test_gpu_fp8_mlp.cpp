// The fused FP8 GELU MLP on CUDA (ops/fp8_mlp.h, ops/fp8_quantize.h's fp8_quantize_act):
//   - the activation casts computed inside the packed transposing cast (cuda::fp8_cast_act) equal
//     ops::gelu's kernel (forward, and its backward for the gradient) followed by the plain cast,
//     bit for bit: data, data_t, the recorded amax, the counts and the column sums — bf16 and
//     f32, E4M3 and E5M2, GPT-2's MLP width; a shape the packed kernel does not take is refused
//     (false) and the op's fallback gives the same bits;
//   - fp8_mlp_gelu equals fp8_linear(gelu(fp8_linear(...))) on CUDA bit for bit (y, gradients,
//     states, counts), delayed scaling (the fused kernels) and current (the activation written).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "ops/activation.h"
#include "ops/fp8_linear.h"
#include "ops/fp8_mlp.h"
#include "ops/fp8_quantize.h"

using namespace st;
using namespace st::ops;

namespace {

std::vector<uint8_t> bytes(const Tensor& t) {
  Tensor h = t.to(Device::cpu).contiguous();
  const uint8_t* p = static_cast<const uint8_t*>(h.data_ptr());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

std::vector<float> normal(size_t n, float std, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.f, std);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// A delayed-scaling state on CUDA holding s (and 1/s), so a cast uses exactly s and records amax.
Fp8Scaling fixed_scale(Fp8Format f, float s) {
  Fp8Scaling sc = fp8_scaling({.format = f, .mode = Fp8ScaleMode::delayed, .history = 4}, Device::cuda);
  sc.state.copy_(Tensor::from_vector(std::vector<float>{s, 1.f / s, 0, 0, 0, 0, 0}, {7}));
  return sc;
}

}  // namespace

TEST(GpuFp8Mlp, ActivationCastsEqualTheActivationThenTheCast) {
  struct Case {
    int64_t R, C;
    bool packed;  // the packed transposing kernel takes it
  };
  for (const Case& k : {Case{2048, 3072, true}, Case{1003, 72, false}})
    for (DType dt : {DType::bf16, DType::f32})
      for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2})
        for (Fp8Act act : {Fp8Act::gelu, Fp8Act::gelu_grad}) {
          SCOPED_TRACE(std::to_string(k.R) + "x" + std::to_string(k.C) + " " + dtype_name(dt) + " " +
                       fp8_format_name(f) + (act == Fp8Act::gelu ? " gelu" : " gelu_grad"));
          // pre ~ N(0, 2): GELU's curved part and both tails; dh small enough that the scale
          // below underflows some of it (the counts)
          const Tensor pre = Tensor::from_vector(normal(k.R * k.C, 2.f, 7), {k.R, k.C}, DType::f32, Device::cuda).to(dt);
          const Tensor dh = Tensor::from_vector(normal(k.R * k.C, 1e-3f, 8), {k.R, k.C}, DType::f32, Device::cuda).to(dt);
          const float s = act == Fp8Act::gelu ? 32.f : 4096.f;
          const bool sums = act == Fp8Act::gelu_grad;  // the up bias's gradient
          // the reference: ops::gelu's kernels write x, then the plain transposing cast
          Tensor x = pre.empty_like();
          act == Fp8Act::gelu ? ops::cuda::gelu_fwd(pre, x) : ops::cuda::gelu_bwd(pre, dh, x);
          Fp8Scaling sr = fixed_scale(f, s);
          Tensor cr = Tensor::zeros({2}, DType::i64, Device::cuda);
          const Fp8Tensor want = fp8_quantize(x, sr, true, cr, sums);
          // the fused kernel
          Fp8Scaling sf = fixed_scale(f, s);
          Tensor cf = Tensor::zeros({2}, DType::i64, Device::cuda);
          const DType q8 = fp8_dtype(f);
          Tensor q = Tensor::empty({k.R, k.C}, q8, Device::cuda), qt = Tensor::empty({k.C, k.R}, q8, Device::cuda);
          Tensor si = Tensor::empty({1}, DType::f32, Device::cuda), cs = Tensor::empty({k.C}, DType::f32, Device::cuda);
          const bool ran = ops::cuda::fp8_cast_act(act, pre, act == Fp8Act::gelu ? Tensor() : dh, q, qt,
                                              fp8_state_ptr(sf, "test"), true, si.data<float>(),
                                              cf.data<int64_t>(), sums ? cs.data<float>() : nullptr);
          ASSERT_EQ(ran, k.packed);
          if (ran) {
            EXPECT_EQ(bytes(q), bytes(want.data));
            EXPECT_EQ(bytes(qt), bytes(want.data_t));
            EXPECT_EQ(bytes(si), bytes(want.scale_inv));
            EXPECT_EQ(bytes(sf.state), bytes(sr.state)) << "the recorded amax";
            EXPECT_EQ(bytes(cf), bytes(cr)) << "[overflow, underflow]";
            if (sums) {
              EXPECT_EQ(bytes(cs), bytes(want.column_sums));
            }
          }
          // the op, on whichever path it takes
          Fp8Scaling so = fixed_scale(f, s);
          Tensor co = Tensor::zeros({2}, DType::i64, Device::cuda);
          const Fp8Tensor got = fp8_quantize_act(act, pre, act == Fp8Act::gelu ? Tensor() : dh, so, co, sums);
          EXPECT_EQ(bytes(got.data), bytes(want.data));
          EXPECT_EQ(bytes(got.data_t), bytes(want.data_t));
          EXPECT_EQ(bytes(so.state), bytes(sr.state));
          EXPECT_EQ(bytes(co), bytes(cr));
          if (sums) {
            EXPECT_EQ(bytes(got.column_sums), bytes(want.column_sums));
          }
          const std::vector<int64_t> n = {cr.to(Device::cpu).data<int64_t>()[0], cr.to(Device::cpu).data<int64_t>()[1]};
          if (act == Fp8Act::gelu_grad) {
            EXPECT_GT(n[1], 0) << "the case exercises the underflow count";
          }
        }
}

TEST(GpuFp8Mlp, EqualsTheUnfusedOpsBitForBit) {
  const int64_t B = 4, T = 256, C = 768, U = 3072;  // GPT-2's widths: the packed kernels
  for (Fp8ScaleMode mode : {Fp8ScaleMode::delayed, Fp8ScaleMode::current}) {
    SCOPED_TRACE(mode == Fp8ScaleMode::delayed ? "delayed" : "current");
    std::vector<std::vector<uint8_t>> outs[2];
    for (int fused = 0; fused < 2; ++fused) {
      auto param = [](std::vector<float> v, Shape s) {
        return Tensor::from_vector(v, s, DType::f32, Device::cuda).to(DType::bf16).requires_grad_();
      };
      Tensor x = param(normal(B * T * C, 1.f, 1), {B, T, C});
      Tensor wu = param(normal(C * U, 0.05f, 2), {C, U}), bu = param(normal(U, 0.5f, 3), {U});
      Tensor wd = param(normal(U * C, 0.02f, 4), {U, C}), bd = param(normal(C, 0.1f, 5), {C});
      const Fp8LinearOptions o{.mode = mode, .grad_format = Fp8Format::e4m3, .history = 4};
      Fp8LinearState up = fp8_linear_state(o, Device::cuda), down = fp8_linear_state(o, Device::cuda);
      up.counts = Tensor::zeros({2}, DType::i64, Device::cuda);
      down.counts = Tensor::zeros({2}, DType::i64, Device::cuda);
      for (int step = 0; step < 2; ++step) {  // delayed: the second step casts with the recorded scales
        for (Tensor* p : {&x, &wu, &bu, &wd, &bd}) p->zero_grad(true);
        Tensor y = fused ? fp8_mlp_gelu(x, wu, bu, wd, bd, up, down)
                         : fp8_linear(gelu(fp8_linear(x, wu, bu, up)), wd, bd, down);
        y.backward(Tensor::from_vector(normal(B * T * C, 1e-3f, 6 + step), {B, T, C}, DType::f32, Device::cuda)
                       .to(DType::bf16));
        outs[fused].push_back(bytes(y.detach()));
        for (Tensor* p : {&x, &wu, &bu, &wd, &bd}) outs[fused].push_back(bytes(p->grad()));
        if (mode == Fp8ScaleMode::delayed) {
          fp8_linear_update(up);
          fp8_linear_update(down);
        }
      }
      for (const Fp8LinearState* s : {&up, &down})
        for (const Fp8Scaling* sc : {&s->x, &s->w, &s->grad}) outs[fused].push_back(bytes(sc->state));
      outs[fused].push_back(bytes(up.counts));
      outs[fused].push_back(bytes(down.counts));
    }
    ASSERT_EQ(outs[0].size(), outs[1].size());
    for (size_t i = 0; i < outs[0].size(); ++i) EXPECT_EQ(outs[0][i], outs[1][i]) << "output " << i;
  }
}
