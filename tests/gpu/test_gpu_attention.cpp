// The packed causal attention (ops::causal_attention_qkv) on CUDA: against the CPU op (f32 / f16 /
// bf16, forward and backward, tile-unaligned T, several heads, a head dim that takes the fallback),
// and bit-for-bit against the 4-d op on head-split copies, which proves that the flash kernels'
// strided reads of q, k, v and strided writes of out and dqkv address the same elements.
#include "ops/attention.h"
#include "tensor/rng.h"
#include "tests/gpu/gpu_cases.h"

using namespace st;
using namespace st::test;

namespace {

OpCase packed(const std::string& name, int64_t B, int64_t T, int64_t H, int64_t D) {
  return {.name = name, .shapes = {{B, T, 3 * H * D}},
          .op = [H](auto& x) { return ops::causal_attention_qkv(x[0], H); }, .lo = -2, .hi = 2};
}

std::vector<float> host(const Tensor& t) { return t.to_float(); }

}  // namespace

TEST(GpuAttention, PackedMatchesCpu) {
  check_gpu(packed("qkv T=1000 H=2 D=64", 2, 1000, 2, 64));
  check_gpu(packed("qkv T=17 H=1 D=64 (one partial tile)", 3, 17, 1, 64));
  check_gpu(packed("qkv T=130 H=3 D=64", 1, 130, 3, 64));
  check_gpu(packed("qkv T=64 H=12 D=64 (one full tile)", 2, 64, 12, 64));
  check_gpu(packed("qkv T=77 H=3 D=40 (fallback)", 2, 77, 3, 40));
}

TEST(GpuAttention, PackedEqualsHeadSplitBitForBit) {
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
}
