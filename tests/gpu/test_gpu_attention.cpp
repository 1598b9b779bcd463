// The packed causal attention (ops::causal_attention_qkv) on CUDA: against the CPU op (f32 / f16 /
// bf16, forward and backward, tile-unaligned T, several heads, a head dim that takes the fallback,
// T = 256 which cuDNN's fused attention takes), bit-for-bit against the 4-d op on head-split copies
// with the flash kernels (their strided reads of q, k, v and writes of out and dqkv address the
// same elements), and cuDNN's fused attention against the flash kernels on the same inputs.
#include "ops/attention.h"
#include "ops/cuda/sdpa_cudnn.h"
#include "tensor/memory_category.h"
#include "tensor/rng.h"
#include "tests/gpu/attention_backend_scope.h"
#include "tests/gpu/gpu_cases.h"

using namespace st;
using namespace st::test;

namespace {

OpCase packed(const std::string& name, int64_t B, int64_t T, int64_t H, int64_t D) {
  return {.name = name, .shapes = {{B, T, 3 * H * D}},
          .op = [H](auto& x) { return ops::causal_attention_qkv(x[0], H); }, .lo = -2, .hi = 2};
}

std::vector<float> host(const Tensor& t) { return t.to_float(); }

// Random packed inputs qkv (B, T, 3·H·64) and an output gradient (B, T, H·64) in dt on the GPU;
// run(backend) gives the packed op's output and dqkv, as doubles.
struct PackedCase {
  int64_t B, T, H;
  DType dt;
  uint64_t seed;
  Tensor qkv, g;

  void init() {
    const int64_t A = H * 64;
    Generator gen(seed);
    Tensor base = Tensor::empty({B, T, 3 * A}, DType::f32, Device::cpu);
    fill_normal(base, gen, 0.f, 1.f);
    Tensor gy = Tensor::empty({B, T, A}, DType::f32, Device::cpu);
    fill_normal(gy, gen, 0.f, 1.f);
    qkv = base.to(Device::cuda).to(dt);
    g = gy.to(Device::cuda).to(dt);
  }
  std::string what() const {
    return std::string(dtype_name(dt)) + " B=" + std::to_string(B) + " T=" + std::to_string(T) +
           " H=" + std::to_string(H);
  }
  std::pair<std::vector<double>, std::vector<double>> run(ops::cuda::AttentionBackend b) const {
    Tensor x = qkv.clone().requires_grad_(), y;
    with_backend(b, [&] {
      y = ops::causal_attention_qkv(x, H);
      y.backward(g);
    });
    return {y.to_double(), x.grad().to_double()};
  }
};

}  // namespace

TEST(GpuAttention, PackedMatchesCpu) {
  check_gpu(packed("qkv T=1000 H=2 D=64", 2, 1000, 2, 64));
  check_gpu(packed("qkv T=17 H=1 D=64 (one partial tile)", 3, 17, 1, 64));
  check_gpu(packed("qkv T=130 H=3 D=64", 1, 130, 3, 64));
  check_gpu(packed("qkv T=64 H=12 D=64 (one full tile)", 2, 64, 12, 64));
  check_gpu(packed("qkv T=77 H=3 D=40 (fallback)", 2, 77, 3, 40));
  check_gpu(packed("qkv T=256 H=2 D=64 (cuDNN where built)", 2, 256, 2, 64));
  // the seed model's shape (f32: the CUDA-core kernels on strided views; f16/bf16: cuDNN)
  check_gpu(packed("qkv T=128 H=8 D=32 (seed model)", 4, 128, 8, 32));
  check_gpu(packed("qkv T=65 H=2 D=128 (CUDA cores, widest)", 1, 65, 2, 128));
}

// The CUDA-core kernels (f32 always; f16/bf16 with ST_ATTENTION=flash and D ≠ 64) on the packed
// views and on head-split contiguous copies: the same kernels in the same order, bit for bit
TEST(GpuAttention, PackedCoreEqualsHeadSplitBitForBit) {
  with_backend(ops::cuda::AttentionBackend::Flash, [&] {
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      const int64_t B = 2, T = 200, H = 3, D = 32, A = H * D;
      Generator gen(11);
      Tensor base = Tensor::empty({B, T, 3 * A}, DType::f32, Device::cpu);
      fill_normal(base, gen, 0.f, 1.f);
      Tensor gy = Tensor::empty({B, T, A}, DType::f32, Device::cpu);
      fill_normal(gy, gen, 0.f, 1.f);
      Tensor qkv = base.to(Device::cuda).to(dt), g = gy.to(Device::cuda).to(dt);
      Tensor x1 = qkv.clone().requires_grad_();
      Tensor y1 = ops::causal_attention_qkv(x1, H);  // (B, T, A)
      y1.backward(g);
      Tensor x2 = qkv.clone().requires_grad_();
      auto split = [&](int64_t i) { return x2.narrow(2, i * A, A).reshape({B, T, H, D}).transpose(1, 2); };
      Tensor y2 = ops::causal_attention(split(0), split(1), split(2)).transpose(1, 2).contiguous().reshape({B, T, A});
      y2.backward(g);
      EXPECT_EQ(host(y1), host(y2)) << dtype_name(dt) << " forward";
      EXPECT_EQ(host(x1.grad()), host(x2.grad())) << dtype_name(dt) << " dqkv";
    }
  });
}

TEST(GpuAttention, PackedEqualsHeadSplitBitForBit) {
  // the flash kernels (T = 200 is not cuDNN's on cuDNN <= 9.15 anyway)
  with_backend(ops::cuda::AttentionBackend::Flash, [&] {
  for (DType dt : {DType::f16, DType::bf16}) {
    const int64_t B = 2, T = 200, H = 3, D = 64, A = H * D;
    Generator gen(7);
    Tensor base = Tensor::empty({B, T, 3 * A}, DType::f32, Device::cpu);
    fill_normal(base, gen, 0.f, 1.f);
    Tensor gy = Tensor::empty({B, T, A}, DType::f32, Device::cpu);
    fill_normal(gy, gen, 0.f, 1.f);
    Tensor qkv = base.to(Device::cuda).to(dt), g = gy.to(Device::cuda).to(dt);

    Tensor x1 = qkv.clone().requires_grad_();
    Tensor y1 = ops::causal_attention_qkv(x1, H);  // (B, T, A)
    y1.backward(g);

    Tensor x2 = qkv.clone().requires_grad_();
    auto split = [&](int64_t i) { return x2.narrow(2, i * A, A).reshape({B, T, H, D}).transpose(1, 2); };
    Tensor y2 = ops::causal_attention(split(0), split(1), split(2)).transpose(1, 2).contiguous().reshape({B, T, A});
    y2.backward(g);

    EXPECT_EQ(host(y1), host(y2)) << dtype_name(dt) << " forward";
    EXPECT_EQ(host(x1.grad()), host(x2.grad())) << dtype_name(dt) << " dqkv";
    std::vector<float> dq = host(x1.grad());
    double norm = 0;
    for (float v : dq) norm += double(v) * v;
    EXPECT_GT(norm, 1.0) << "the gradient must not be zero";
  }
  });
}

// cuDNN's fused attention and the flash kernels on the same inputs: the packed op's output and
// dqkv, and the 4-d launchers' lse (which either backward reads). The cuDNN call count must grow by
// exactly the calls made, so a silent fallback to flash fails the test.
TEST(GpuAttention, CudnnMatchesFlash) {
  using ops::cuda::AttentionBackend;
  if (!cudnn_built()) GTEST_SKIP() << ops::cuda::cudnn_sdpa_status();
  for (DType dt : {DType::f16, DType::bf16})
    for (PackedCase c : {PackedCase{2, 256, 3, dt, 5}, PackedCase{1, 1024, 2, dt, 5}, PackedCase{3, 128, 12, dt, 5}}) {
      c.init();
      const int64_t D = 64, A = c.H * D;
      const std::string what = c.what();
      const auto [y_flash, dx_flash] = c.run(AttentionBackend::Flash);
      const int64_t calls = ops::cuda::cudnn_sdpa_calls();
      const auto [y_cudnn, dx_cudnn] = c.run(AttentionBackend::Cudnn);
      EXPECT_EQ(ops::cuda::cudnn_sdpa_calls() - calls, 2) << what << ": " << ops::cuda::cudnn_sdpa_status();
      const double tol = dt == DType::f16 ? 2e-3 : 1.6e-2;
      EXPECT_LE(rel_err(y_cudnn, y_flash), tol) << what << " forward";
      EXPECT_LE(rel_err(dx_cudnn, dx_flash), 2 * tol) << what << " dqkv";

      // lse of the 4-d launchers on head-split copies (B, H, T, D)
      auto split = [&](int64_t i) {
        return c.qkv.narrow(2, i * A, A).reshape({c.B, c.T, c.H, D}).transpose(1, 2).contiguous();
      };
      Tensor q = split(0), k = split(1), v = split(2);
      Tensor o1 = q.empty_like(), o2 = q.empty_like();
      Tensor l1 = Tensor::empty({c.B, c.H, c.T}, DType::f32, Device::cuda), l2 = l1.empty_like();
      with_backend(AttentionBackend::Flash, [&] { ops::cuda::attention_fwd(q, k, v, o1, l1); });
      with_backend(AttentionBackend::Cudnn, [&] { ops::cuda::attention_fwd(q, k, v, o2, l2); });
      EXPECT_LE(rel_err(l2.to_double(), l1.to_double()), 1e-5) << what << " lse";
      EXPECT_LE(rel_err(o2.to_double(), o1.to_double()), tol) << what << " 4-d forward";
    }
}

// ST_ATTENTION=deterministic (the default): cuDNN's deterministic backward gives the same bits
// twice, agrees with the flash kernels, and really ran (cuDNN calls counted).
TEST(GpuAttention, CudnnDeterministicIsReproducible) {
  using ops::cuda::AttentionBackend;
  if (!cudnn_built()) GTEST_SKIP() << ops::cuda::cudnn_sdpa_status();
  for (DType dt : {DType::f16, DType::bf16})
    for (PackedCase c : {PackedCase{2, 256, 3, dt, 9}, PackedCase{1, 1024, 2, dt, 9}}) {
      c.init();
      const std::string what = c.what();
      const int64_t calls = ops::cuda::cudnn_sdpa_calls();
      const auto [y1, dx1] = c.run(AttentionBackend::Deterministic);
      const auto [y2, dx2] = c.run(AttentionBackend::Deterministic);
      EXPECT_EQ(ops::cuda::cudnn_sdpa_calls() - calls, 4) << what << ": " << ops::cuda::cudnn_sdpa_status();
      EXPECT_EQ(y1, y2) << what << " forward";
      EXPECT_EQ(dx1, dx2) << what << " dqkv: not the same bits twice";
      const auto [y_flash, dx_flash] = c.run(AttentionBackend::Flash);
      const double tol = dt == DType::f16 ? 2e-3 : 1.6e-2;
      EXPECT_LE(rel_err(dx1, dx_flash), 2 * tol) << what << " dqkv against flash";
    }
}

// A long sequence under the deterministic backend: cuDNN's deterministic backward would keep dP,
// B·H·T² 16-bit values — 4 GiB at H 8, T 16384, above kDeterministicWorkspaceMax — so the flash
// backward runs instead (cuDNN's forward still does), and the step's tensors stay O(T): the peak
// beside the inputs is the packed gradient and the flash scratch, well under the 1 GiB bound
// (measured: qkv 48 MiB, dqkv 48 MiB), where cuDNN's workspace alone would be 4 GiB. The gradient
// equals the flash backend's within the bf16 bound of the test above.
TEST(GpuAttention, DeterministicBackwardAtLongSequenceTakesNoQuadraticWorkspace) {
  using ops::cuda::AttentionBackend;
  if (!cudnn_built()) GTEST_SKIP() << ops::cuda::cudnn_sdpa_status();
  PackedCase c{1, 16384, 8, DType::bf16, 5};
  ASSERT_GT(ops::deterministic_workspace_bytes(c.B, c.H, c.T), ops::kDeterministicWorkspaceMax);
  c.init();
  reset_memory_peaks(Device::cuda);
  const size_t before = memory_usage(Device::cuda).total_in_use;
  const auto [y, dx] = c.run(AttentionBackend::Deterministic);
  const size_t peak = memory_usage(Device::cuda).total_peak - before;
  EXPECT_NE(ops::cuda::cudnn_sdpa_status().find("workspace"), std::string::npos) << ops::cuda::cudnn_sdpa_status();
  EXPECT_LT(peak, size_t{1} << 30) << "the step's tensors beside the inputs";
  const auto [y_flash, dx_flash] = c.run(AttentionBackend::Flash);
  EXPECT_LE(rel_err(dx, dx_flash), 2 * 1.6e-2) << "dqkv against flash";
}

// ST_ATTENTION=cudnn is strict: a shape cuDNN declines is an error that says why, not a fallback.
TEST(GpuAttention, CudnnRequiredButDeclinedThrows) {
  using ops::cuda::AttentionBackend;
  if (!cudnn_built()) GTEST_SKIP() << ops::cuda::cudnn_sdpa_status();
  Tensor qkv = Tensor::zeros({1, 128, 3 * 136}, DType::f16, Device::cuda);  // head dim 136 > 128: declined
  with_backend(AttentionBackend::Cudnn, [&] {
    try {
      ops::causal_attention_qkv(qkv, 1);
      ADD_FAILURE() << "expected DeviceError";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("head dim"), std::string::npos) << e.what();
    }
  });
}
