// Grouped-query attention with rotary embedding on CUDA (ops::causal_attention_qkv(qkv, H, Hkv,
// rope, offset), ops/cuda/attention.cu):
//   - every backend against the CPU op, forward and dqkv, f32 / f16 / bf16: the flash kernels
//     (D 64, f16/bf16), the CUDA-core kernels (f32, other head dims), cuDNN's fused attention
//     (reading the rotated copy; its calls counted, so a silent fallback fails);
//   - the flash and CUDA-core kernels' grouping against the multi-head op on k, v heads repeated,
//     and their fused rotation against ops::apply_rope on q, k then the op without rope: the same
//     bits (forward; dq too for the grouping);
//   - the device tables are the host tables' bits; apply_rope on CUDA gives the CPU's bits.
// Tolerances: the tests/gpu defaults (f32 1e-5, f16 1e-2, bf16 4e-2, relative norm error against
// the CPU f32 op on the same rounded inputs). The rotation in the dtype (as HF does) adds to the
// low-precision error: measured on the CPU (the CPU bf16 op against the CPU f32 op, these shapes)
// 3.6e-3 / 4.5e-3 (forward / dqkv) in bf16 against 1.6e-3 / 2.2e-3 without rope, 4.5e-4 / 5.8e-4 in
// f16, an order of magnitude inside the defaults.
#include "ops/attention.h"
#include "ops/cuda/sdpa_cudnn.h"
#include "ops/rope.h"
#include "tensor/rng.h"
#include "tests/gpu/attention_backend_scope.h"
#include "tests/gpu/gpu_cases.h"

using namespace st;
using namespace st::test;
using ops::cuda::AttentionBackend;

namespace {

struct Heads {
  int64_t B, T, H, Hkv, D;
  int64_t W() const { return (H + 2 * Hkv) * D; }
};

OpCase gqa(const std::string& name, Heads s, const ops::RopeTable* rope, int64_t offset) {
  return {.name = name,
          .shapes = {{s.B, s.T, s.W()}},
          .op = [s, rope, offset](auto& x) { return ops::causal_attention_qkv(x[0], s.H, s.Hkv, rope, offset); },
          .lo = -2,
          .hi = 2};
}

ops::RopeConfig config(double theta, int64_t D, bool llama3) {
  ops::RopeConfig c;
  c.theta = theta;
  c.head_dim = D;
  c.llama3 = llama3;
  return c;
}

Tensor normal(const Shape& s, uint64_t seed) {
  Generator gen(seed);
  Tensor t = Tensor::empty(s);
  fill_normal(t, gen, 0.f, 1.f);
  return t;
}

std::vector<float> host(const Tensor& t) { return t.to_float(); }

}  // namespace

// Flash: our kernels only (flash at D 64 in f16/bf16, the CUDA-core kernels otherwise);
// Deterministic: cuDNN where it takes the shape, else ours — both against the CPU.
TEST(GpuAttentionGqa, EveryBackendMatchesCpu) {
  const ops::RopeTable r64(config(500000.0, 64, true), 512), r32(config(10000.0, 32, false), 512);
  const ops::RopeTable r40(config(10000.0, 40, false), 512), r128(config(500000.0, 128, true), 512);
  for (AttentionBackend b : {AttentionBackend::Flash, AttentionBackend::Deterministic})
    with_backend(b, [&] {
      check_gpu(gqa("gqa H 4 Hkv 2 D 64 rope T 130", {2, 130, 4, 2, 64}, &r64, 0));
      check_gpu(gqa("mqa H 3 Hkv 1 D 64 rope offset 17 T 256", {1, 256, 3, 1, 64}, &r64, 17));
      check_gpu(gqa("gqa H 4 Hkv 1 D 32 rope offset 5 T 77", {2, 77, 4, 1, 32}, &r32, 5));
      check_gpu(gqa("mha H 2 Hkv 2 D 40 rope T 65 (CUDA cores)", {1, 65, 2, 2, 40}, &r40, 0));
      check_gpu(gqa("gqa H 4 Hkv 2 D 128 rope T 128", {1, 128, 4, 2, 128}, &r128, 3));
      check_gpu(gqa("gqa H 4 Hkv 2 D 64 no rope T 130", {2, 130, 4, 2, 64}, nullptr, 0));
      check_gpu(gqa("gqa H 6 Hkv 2 D 32 no rope T 17", {3, 17, 6, 2, 32}, nullptr, 0));
    });
}

// cuDNN (ST_ATTENTION=cudnn: a declined shape throws) on grouped heads with and without rope,
// against our kernels; exactly two cuDNN calls (forward, backward) per case.
TEST(GpuAttentionGqa, CudnnMatchesOurKernels) {
  if (!cudnn_built()) GTEST_SKIP() << ops::cuda::cudnn_sdpa_status();
  const ops::RopeTable r64(config(500000.0, 64, true), 1024), r128(config(10000.0, 128, false), 1024);
  struct Case {
    Heads s;
    const ops::RopeTable* rope;
    int64_t offset;
  };
  for (DType dt : {DType::f16, DType::bf16})
    for (const Case& c : {Case{{2, 256, 8, 2, 64}, &r64, 0}, Case{{1, 512, 4, 1, 64}, &r64, 100},
                          Case{{2, 128, 4, 2, 128}, &r128, 7}, Case{{2, 256, 6, 3, 64}, nullptr, 0}}) {
      const Tensor x0 = normal({c.s.B, c.s.T, c.s.W()}, 21).to(Device::cuda).to(dt);
      const Tensor g0 = normal({c.s.B, c.s.T, c.s.H * c.s.D}, 22).to(Device::cuda).to(dt);
      auto run = [&](AttentionBackend b) {
        Tensor x = x0.clone().requires_grad_(), y;
        with_backend(b, [&] {
          y = ops::causal_attention_qkv(x, c.s.H, c.s.Hkv, c.rope, c.offset);
          y.backward(g0);
        });
        return std::pair{y.to_double(), x.grad().to_double()};
      };
      const auto [y_ours, dx_ours] = run(AttentionBackend::Flash);
      const int64_t calls = ops::cuda::cudnn_sdpa_calls();
      const auto [y_cudnn, dx_cudnn] = run(AttentionBackend::Cudnn);
      const std::string what = std::string(dtype_name(dt)) + " H " + std::to_string(c.s.H) + " Hkv " +
                               std::to_string(c.s.Hkv) + " D " + std::to_string(c.s.D) + (c.rope ? " rope" : "");
      EXPECT_EQ(ops::cuda::cudnn_sdpa_calls() - calls, 2) << what << ": " << ops::cuda::cudnn_sdpa_status();
      const double tol = dt == DType::f16 ? 2e-3 : 1.6e-2;  // as tests/gpu/test_gpu_attention.cpp: CudnnMatchesFlash
      EXPECT_LE(rel_err(y_cudnn, y_ours), tol) << what << " forward";
      EXPECT_LE(rel_err(dx_cudnn, dx_ours), 2 * tol) << what << " dqkv";
    }
}

// Our kernels read key/value head h / (H/Hkv) for query head h: the op on Hkv heads equals the
// multi-head op on qkv whose k, v heads are repeated (same data in every tile, same arithmetic):
// forward and dq bit for bit (dk, dv differ only in where the group's sum is rounded).
TEST(GpuAttentionGqa, GroupingEqualsRepeatedHeadsBitForBit) {
  with_backend(AttentionBackend::Flash, [&] {
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (int64_t D : {64, 32}) {
        const int64_t B = 2, T = 150, H = 6, Hkv = 2, rep = H / Hkv;
        const Tensor x0 = normal({B, T, (H + 2 * Hkv) * D}, 31).to(Device::cuda).to(dt);
        const Tensor g0 = normal({B, T, H * D}, 32).to(Device::cuda).to(dt);
        std::vector<Tensor> parts{x0.narrow(2, 0, H * D)};
        for (int64_t part : {H, H + Hkv})  // k heads, then v heads, each repeated rep times in group order
          for (int64_t g = 0; g < Hkv; ++g)
            for (int64_t j = 0; j < rep; ++j) parts.push_back(x0.narrow(2, (part + g) * D, D));
        Tensor a = x0.clone().requires_grad_(), b = Tensor::cat(parts, 2).contiguous().requires_grad_();
        Tensor ya = ops::causal_attention_qkv(a, H, Hkv), yb = ops::causal_attention_qkv(b, H);
        ya.backward(g0);
        yb.backward(g0);
        const std::string what = std::string(dtype_name(dt)) + " D " + std::to_string(D);
        EXPECT_EQ(host(ya), host(yb)) << what << " forward";
        EXPECT_EQ(host(a.grad().narrow(2, 0, H * D)), host(b.grad().narrow(2, 0, H * D))) << what << " dq";
      }
  });
}

// The flash and CUDA-core kernels' rotation is ops/rope.h's expression: q, k roped by apply_rope
// (tensor ops) then the op without rope gives the fused op's forward bits.
TEST(GpuAttentionGqa, FusedRopeEqualsApplyRopeBitForBit) {
  const ops::RopeTable r64(config(500000.0, 64, true), 512), r48(config(10000.0, 48, false), 512);
  with_backend(AttentionBackend::Flash, [&] {
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (const ops::RopeTable* table : {&r64, &r48}) {
        const int64_t B = 2, T = 140, H = 4, Hkv = 2, D = table->head_dim(), offset = 9;
        const Tensor x = normal({B, T, (H + 2 * Hkv) * D}, 41).to(Device::cuda).to(dt);
        std::vector<int64_t> pos;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t t = 0; t < T; ++t) pos.push_back(offset + t);
        const Tensor positions = Tensor::from_vector(pos, {B, T}).to(Device::cuda);
        auto roped = [&](int64_t col, int64_t n) {
          return ops::apply_rope(x.narrow(2, col, n * D).reshape({B, T, n, D}), *table, positions).reshape({B, T, n * D});
        };
        const Tensor xr = Tensor::cat({roped(0, H), roped(H * D, Hkv), x.narrow(2, (H + Hkv) * D, Hkv * D)}, 2);
        EXPECT_EQ(host(ops::causal_attention_qkv(x, H, Hkv, table, offset)), host(ops::causal_attention_qkv(xr, H, Hkv)))
            << dtype_name(dt) << " D " << D;
      }
  });
}

TEST(GpuAttentionGqa, DeviceTablesAndApplyRopeHaveTheCpuBits) {
  const ops::RopeTable table(config(500000.0, 64, true), 300);
  EXPECT_EQ(host(table.cos(Device::cuda).to(Device::cpu)), host(table.cos()));
  EXPECT_EQ(host(table.sin(Device::cuda).to(Device::cpu)), host(table.sin()));
  std::vector<int64_t> pos;
  for (int64_t i = 0; i < 2 * 37; ++i) pos.push_back((i * 7) % 300);
  const Tensor positions = Tensor::from_vector(pos, {2, 37});
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor x = normal({2, 37, 3, 64}, 51).to(dt);
    EXPECT_EQ(host(ops::apply_rope(x.to(Device::cuda), table, positions.to(Device::cuda))),
              host(ops::apply_rope(x, table, positions)))
        << dtype_name(dt);
  }
}
