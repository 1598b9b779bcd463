// The fused FP8 MLP on CUDA (ops/fp8_mlp.h, ops/fp8_quantize.h's fp8_quantize_act):
//   - the activation casts computed inside the packed transposing cast (cuda::fp8_cast_act) equal
//     the activation's own kernel (ops::gelu / ops::swiglu, forward, and backward for the
//     gradient) followed by the plain cast, bit for bit: data, data_t, the recorded amax, the
//     counts and the column sums — bf16 and f32, E4M3 and E5M2; a shape the packed kernel does
//     not take is refused (false) and the op's fallback gives the same bits;
//   - fp8_mlp equals fp8_linear(act(fp8_linear(...))) on CUDA bit for bit (y, gradients, states,
//     counts): GELU at GPT-2's widths, SwiGLU with (out, in) weights as Llama's; delayed scaling
//     (the fused kernels) and current (the activation written).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "ops/activation.h"
#include "ops/fp8_linear.h"
#include "ops/fp8_mlp.h"
#include "ops/fp8_quantize.h"
#include "ops/swiglu.h"
#include "tests/support/fp8_test_util.h"

using namespace st;
using namespace st::ops;
using st::test::normal;
using st::test::bytes;

namespace {

// A delayed-scaling state on CUDA holding s (and 1/s), so a cast uses exactly s and records amax.
Fp8Scaling fixed_scale(Fp8Format f, float s) {
  Fp8Scaling sc = fp8_scaling({.format = f, .mode = Fp8ScaleMode::delayed, .history = 4}, Device::cuda);
  sc.state.copy_(Tensor::from_vector(std::vector<float>{s, 1.f / s, 0, 0, 0, 0, 0}, {7}));
  return sc;
}

}  // namespace

TEST(GpuFp8Mlp, ActivationCastsEqualTheActivationThenTheCast) {
  struct Case {
    Fp8Act act;
    int64_t R, W;  // pre (R, W)
    bool packed;   // the packed transposing kernel takes it
  };
  const Case cases[] = {{Fp8Act::gelu, 2048, 3072, true},        {Fp8Act::gelu_grad, 2048, 3072, true},
                        {Fp8Act::gelu, 1003, 72, false},         {Fp8Act::gelu_grad, 1003, 72, false},
                        {Fp8Act::swiglu, 1024, 2 * 1536, true},  {Fp8Act::swiglu_grad, 1024, 2 * 1536, true},
                        {Fp8Act::swiglu, 1003, 2 * 36, false},   {Fp8Act::swiglu_grad, 1003, 2 * 36, false},
                        // the paired gradient cast's edges: a short last row tile (1000 % 256), a
                        // half (1544) that ends inside a column tile
                        {Fp8Act::swiglu_grad, 1000, 2 * 1544, true}};
  const char* names[] = {"gelu", "gelu_grad", "swiglu", "swiglu_grad"};
  for (const Case& k : cases)
    for (DType dt : {DType::bf16, DType::f32})
      for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
        const bool grad = k.act == Fp8Act::gelu_grad || k.act == Fp8Act::swiglu_grad;
        const bool swiglu = k.act == Fp8Act::swiglu || k.act == Fp8Act::swiglu_grad;
        const int64_t D = swiglu ? k.W / 2 : k.W, C = k.act == Fp8Act::swiglu ? D : k.W;  // dy (R, D), x (R, C)
        SCOPED_TRACE(std::to_string(k.R) + "x" + std::to_string(k.W) + " " + dtype_name(dt) + " " +
                     fp8_format_name(f) + " " + names[static_cast<int>(k.act)]);
        // pre ~ N(0, 2): the activations' curved parts and both tails; dy small enough that the
        // scale below underflows some of the gradient (the counts)
        const Tensor pre = Tensor::from_vector(normal(k.R * k.W, 2.f, 7), {k.R, k.W}, DType::f32, Device::cuda).to(dt);
        const Tensor dy = grad ? Tensor::from_vector(normal(k.R * D, 1e-3f, 8), {k.R, D}, DType::f32, Device::cuda).to(dt)
                               : Tensor();
        const float s = grad ? 4096.f : 32.f;
        const bool sums = grad;  // the up bias's gradient
        // the reference: the activation's kernel writes x, then the plain transposing cast
        Tensor x = Tensor::empty({k.R, C}, dt, Device::cuda);
        switch (k.act) {
          case Fp8Act::gelu: ops::cuda::gelu_fwd(pre, x); break;
          case Fp8Act::gelu_grad: ops::cuda::gelu_bwd(pre, dy, x); break;
          case Fp8Act::swiglu: ops::cuda::swiglu_fwd(pre, x); break;
          case Fp8Act::swiglu_grad: ops::cuda::swiglu_bwd(pre, dy, x); break;
        }
        Fp8Scaling sr = fixed_scale(f, s);
        Tensor cr = Tensor::zeros({2}, DType::i64, Device::cuda);
        const Fp8Tensor want = fp8_quantize(x, sr, true, cr, sums);
        // the fused kernel
        Fp8Scaling sf = fixed_scale(f, s);
        Tensor cf = Tensor::zeros({2}, DType::i64, Device::cuda);
        const DType q8 = fp8_dtype(f);
        Tensor q = Tensor::empty({k.R, C}, q8, Device::cuda), qt = Tensor::empty({C, k.R}, q8, Device::cuda);
        Tensor si = Tensor::empty({1}, DType::f32, Device::cuda), cs = Tensor::empty({C}, DType::f32, Device::cuda);
        const bool ran = ops::cuda::fp8_cast_act(k.act, pre, dy, q, qt, fp8_state_ptr(sf, "test"), true,
                                                 si.data<float>(), cf.data<int64_t>(), sums ? cs.data<float>() : nullptr);
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
        const Fp8Tensor got = fp8_quantize_act(k.act, pre, dy, so, co, sums);
        EXPECT_EQ(bytes(got.data), bytes(want.data));
        EXPECT_EQ(bytes(got.data_t), bytes(want.data_t));
        EXPECT_EQ(bytes(so.state), bytes(sr.state));
        EXPECT_EQ(bytes(co), bytes(cr));
        if (sums) {
          EXPECT_EQ(bytes(got.column_sums), bytes(want.column_sums));
          EXPECT_GT(cr.to(Device::cpu).data<int64_t>()[1], 0) << "the case exercises the underflow count";
        }
      }
}

TEST(GpuFp8Mlp, EqualsTheUnfusedOpsBitForBit) {
  struct Case {
    Fp8MlpAct act;
    int64_t B, T, C, U;  // U: up's width (swiglu: 2F)
    bool biases, out_in;
  };
  // GPT-2's MLP (GELU, (in, out), biases); Llama's (SwiGLU, (out, in), no biases) at C 512, F 1536
  for (const Case& k : {Case{Fp8MlpAct::gelu, 4, 256, 768, 3072, true, false},
                        Case{Fp8MlpAct::swiglu, 2, 256, 512, 2 * 1536, false, true}})
    for (Fp8ScaleMode mode : {Fp8ScaleMode::delayed, Fp8ScaleMode::current}) {
      const bool swiglu = k.act == Fp8MlpAct::swiglu;
      const int64_t H = swiglu ? k.U / 2 : k.U;
      SCOPED_TRACE(std::string(swiglu ? "swiglu " : "gelu ") + (mode == Fp8ScaleMode::delayed ? "delayed" : "current"));
      std::vector<std::vector<uint8_t>> outs[2];
      for (int fused = 0; fused < 2; ++fused) {
        auto param = [&](std::vector<float> v, int64_t in, int64_t out) {  // (in, out) or (out, in)
          Tensor w = Tensor::from_vector(v, {in, out}, DType::f32, Device::cuda).to(DType::bf16);
          return (k.out_in ? w.transpose(0, 1).contiguous() : w).requires_grad_();
        };
        auto vec = [&](std::vector<float> v, Shape s) {
          return Tensor::from_vector(v, s, DType::f32, Device::cuda).to(DType::bf16).requires_grad_();
        };
        Tensor x = vec(normal(k.B * k.T * k.C, 1.f, 1), {k.B, k.T, k.C});
        Tensor wu = param(normal(k.C * k.U, 0.05f, 2), k.C, k.U), wd = param(normal(H * k.C, 0.02f, 4), H, k.C);
        Tensor bu = k.biases ? vec(normal(k.U, 0.5f, 3), {k.U}) : Tensor();
        Tensor bd = k.biases ? vec(normal(k.C, 0.1f, 5), {k.C}) : Tensor();
        const Fp8LinearOptions o{.mode = mode, .grad_format = Fp8Format::e4m3, .history = 4};
        Fp8LinearState up = fp8_linear_state(o, Device::cuda), down = fp8_linear_state(o, Device::cuda);
        up.counts = Tensor::zeros({2}, DType::i64, Device::cuda);
        down.counts = Tensor::zeros({2}, DType::i64, Device::cuda);
        for (int step = 0; step < 2; ++step) {  // delayed: the second step casts with the recorded scales
          for (Tensor* p : {&x, &wu, &bu, &wd, &bd})
            if (p->defined()) p->zero_grad(true);
          Tensor y;
          if (fused) {
            y = fp8_mlp(x, {wu, bu, wd, bd, k.out_in}, k.act, up, down);
          } else {
            Tensor pre = fp8_linear(x, wu, bu, up, k.out_in);
            y = fp8_linear(swiglu ? ops::swiglu(pre) : gelu(pre), wd, bd, down, k.out_in);
          }
          y.backward(Tensor::from_vector(normal(k.B * k.T * k.C, 1e-3f, 6 + step), {k.B, k.T, k.C}, DType::f32,
                                         Device::cuda)
                         .to(DType::bf16));
          outs[fused].push_back(bytes(y.detach()));
          for (Tensor* p : {&x, &wu, &bu, &wd, &bd})
            if (p->defined()) outs[fused].push_back(bytes(p->grad()));
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
