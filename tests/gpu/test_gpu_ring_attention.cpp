// Ring attention's block ops on CUDA (ops/block_attention.h: the flash kernels' Full / Acc
// instantiations and cuDNN's fused graphs, ops/cuda/block_attention.cu; ops/attention_merge.h: ops/cuda/attention_merge.cu)
// against the CPU ops on the same rounded inputs, f16 and bf16, head dim 64, GQA:
//   - one block, causal and full, chunk lengths 96 (a partial key tile: the Full kernels' key-tail
//     mask) and 128: out, lse, then the backward against the same lse / Δ: dq, dk, dv;
//   - dq accumulates: two backward calls into one accumulator give exactly twice one call's;
//   - merge and Δ on CUDA against the CPU's;
//   - the cases the flash kernels do not take (f32, head dim ≠ 64, Tq ≠ Tk) are DeviceErrors;
//   - a ring of cp = 2 run on CUDA (block ops + merge, load-balanced split) against the CPU's whole
//     causal attention (cpu::attention_fwd / attention_bwd on the key/value heads repeated).
// Tolerances: the tests/gpu defaults (f16 1e-2, bf16 4e-2: relative norm error against the CPU f32
// op on the same rounded inputs, what the flash kernels already meet in test_gpu_attention); lse
// is computed from f32 scores of exact products on both sides (only the order of the sums and
// exp2f differ): 1e-4 relative. Merge and Δ are f32 on both sides: 1e-5.
#include "ops/attention.h"
#include "ops/cuda/sdpa_cudnn.h"
#include "tensor/rng.h"
#include "tests/gpu/attention_backend_scope.h"
#include "tests/gpu/gpu_cases.h"
#include "tests/ops/ring_sim.h"

using namespace st;
using namespace st::ops;
using namespace st::test;
using namespace st::test::ring;

namespace {

double tol_of(DType dt) { return dt == DType::f16 ? 1e-2 : 4e-2; }

// x rounded to dt, back in f32 (the CPU reference's inputs)
Tensor rounded(const Tensor& x, DType dt) { return x.to(dt).to(DType::f32); }

Tensor cuda_of(const Tensor& x, DType dt) { return x.to(dt).to(Device::cuda); }

// One block on CUDA against the CPU op, for f16/bf16 × `lengths` × {causal, full}, B 2, 4 query
// heads over 2 key/value heads, D 64, inputs drawn from seeds seed … seed + 3: out, lse, then the
// backward against the CPU's lse and Δ (the block is the whole attention of its rows, so they are
// the global ones): dq, dk, dv; dq is added to (+=): a second call doubles it exactly (x + x = 2x
// in f32, the same kernel bits). `through_cudnn`: the backward is handed the block's output, and
// both directions must have run on cuDNN (its call count).
void blocks_match_cpu(std::initializer_list<int64_t> lengths, uint64_t seed, bool through_cudnn) {
  const int64_t B = 2, H = 4, Hkv = 2, D = 64;
  for (DType dt : {DType::f16, DType::bf16})
    for (int64_t C : lengths)
      for (BlockMask mask : {BlockMask::causal, BlockMask::full}) {
        const std::string what = std::string(dtype_name(dt)) + " C " + std::to_string(C) + " " + block_mask_name(mask);
        SCOPED_TRACE(what);
        Tensor q = rounded(rand4(B, H, C, D, seed, 2.f), dt), k = rounded(rand4(B, Hkv, C, D, seed + 1, 2.f), dt);
        Tensor v = rounded(rand4(B, Hkv, C, D, seed + 2, 1.f), dt), g = rounded(rand4(B, H, C, D, seed + 3, 1.f), dt);
        BlockAttention ref = block_attention_fwd(q, k, v, mask);  // CPU f32
        const int64_t calls = st::ops::cuda::cudnn_sdpa_calls();
        BlockAttention y = block_attention_fwd(cuda_of(q, dt), cuda_of(k, dt), cuda_of(v, dt), mask);
        EXPECT_LE(rel_err(y.out.to_double(), ref.out.to_double()), tol_of(dt)) << "out";
        EXPECT_LE(rel_err(y.lse.to_double(), ref.lse.to_double()), 1e-4) << "lse";

        Tensor delta = attention_delta(ref.out, g);
        Tensor dq_ref = Tensor::zeros({B, H, C, D});
        BlockGrads gr = block_attention_bwd(q, k, v, g, ref.lse, delta, mask, dq_ref);
        Tensor dq = Tensor::zeros({B, H, C, D}, DType::f32, Device::cuda);
        Tensor lse_c = ref.lse.to(Device::cuda), delta_c = delta.to(Device::cuda);
        Tensor out_c = through_cudnn ? cuda_of(ref.out, dt) : Tensor();  // none: the flash backward
        auto backward = [&] {
          return block_attention_bwd(cuda_of(q, dt), cuda_of(k, dt), cuda_of(v, dt), cuda_of(g, dt), lse_c, delta_c,
                                     mask, dq, out_c);
        };
        BlockGrads gc = backward();
        if (through_cudnn)
          EXPECT_EQ(st::ops::cuda::cudnn_sdpa_calls() - calls, 2)
              << "both directions on cuDNN: " << st::ops::cuda::cudnn_sdpa_status();
        EXPECT_LE(rel_err(dq.to_double(), dq_ref.to_double()), tol_of(dt)) << "dq";
        EXPECT_LE(rel_err(gc.dk.to_double(), gr.dk.to_double()), tol_of(dt)) << "dk";
        EXPECT_LE(rel_err(gc.dv.to_double(), gr.dv.to_double()), tol_of(dt)) << "dv";
        EXPECT_GT(max_abs(dq_ref.to_double()), 0.1) << "the gradient must not be zero";

        const std::vector<float> once = dq.to_float();
        backward();
        const std::vector<float> twice = dq.to_float();
        for (size_t i = 0; i < once.size(); ++i) ASSERT_EQ(twice[i], 2.f * once[i]) << "element " << i;
      }
}

}  // namespace

// The flash kernels' Full / Acc instantiations (the backend that never takes cuDNN): chunk
// lengths 96 (a partial key tile: the Full kernels' key-tail mask) and 128.
TEST(GpuRingAttention, BlockMatchesCpu) {
  with_backend(AttentionBackend::Flash, [] { blocks_match_cpu({96, 128}, 31, /*through_cudnn=*/false); });
}

// cuDNN's fused graphs for a block (the default backend, deterministic backward): the diagonal
// block causal, a past block unmasked, chunk lengths 128 and 256 (cuDNN ≤ 9.15 takes multiples
// of 128), within the same bounds as the flash kernels; cuDNN's deterministic dq, added in f32,
// doubles exactly too.
TEST(GpuRingAttention, BlockThroughCudnnMatchesCpu) {
  if (!cudnn_built()) GTEST_SKIP() << st::ops::cuda::cudnn_sdpa_status();
  with_backend(AttentionBackend::Deterministic, [] { blocks_match_cpu({128, 256}, 41, /*through_cudnn=*/true); });
}

TEST(GpuRingAttention, MergeAndDeltaMatchCpu) {
  Tensor oa = rand4(2, 3, 70, 64, 41, 1.f), ob = rand4(2, 3, 70, 64, 42, 1.f);
  std::vector<float> la = values(2 * 3 * 70, 43, 20.f), lb = values(2 * 3 * 70, 44, 20.f);
  la[0] = lb[1] = -INFINITY;  // empty rows on either side
  la[2] = lb[2] = -INFINITY;  // both empty: the accumulator row stays as it is, lse −inf
  Tensor la_t = Tensor::from_vector(la, {2, 3, 70}), lb_t = Tensor::from_vector(lb, {2, 3, 70});
  Tensor o_cpu = oa.clone(), l_cpu = la_t.clone();
  merge_attention(o_cpu, l_cpu, ob, lb_t);
  Tensor o_gpu = oa.to(Device::cuda), l_gpu = la_t.to(Device::cuda);
  merge_attention(o_gpu, l_gpu, ob.to(Device::cuda), lb_t.to(Device::cuda));
  EXPECT_LE(rel_err(o_gpu.to_double(), o_cpu.to_double()), 1e-5);
  const std::vector<float> lg = l_gpu.to_float(), lc = l_cpu.to_float();
  for (size_t i = 0; i < lg.size(); ++i) {
    if (std::isinf(lc[i]))
      EXPECT_EQ(lg[i], lc[i]) << i;
    else
      EXPECT_NEAR(lg[i], lc[i], 1e-5 * std::max(1.f, std::fabs(lc[i]))) << i;
  }
  Tensor d_cpu = attention_delta(oa, ob), d_gpu = attention_delta(oa.to(Device::cuda), ob.to(Device::cuda));
  EXPECT_LE(rel_err(d_gpu.to_double(), d_cpu.to_double()), 1e-5);
}

// Chunks of 64 (cuDNN ≤ 9.15 declines them: the flash kernels) and of 128 (cuDNN's graphs under the
// default backend, checked by its call count).
TEST(GpuRingAttention, RingOfTwoMatchesWholeAttention) {
  const int64_t N = 2, B = 1, H = 4, Hkv = 2, D = 64;
  for (const int64_t C : {64, 128}) {
    for (DType dt : {DType::f16, DType::bf16}) {
      const int64_t T = 2 * N * C;
      SCOPED_TRACE(std::string(dtype_name(dt)) + " C " + std::to_string(C));
      const int64_t calls = st::ops::cuda::cudnn_sdpa_calls();
      Tensor q = rounded(rand4(B, H, T, D, 51, 2.f), dt), k = rounded(rand4(B, Hkv, T, D, 52, 2.f), dt);
      Tensor v = rounded(rand4(B, Hkv, T, D, 53, 1.f), dt), g = rounded(rand4(B, H, T, D, 54, 1.f), dt);
      Tensor ke = expand_heads(k, H), ve = expand_heads(v, H);
      Tensor out = q.empty_like(), lse = Tensor::empty({B, H, T});
      cpu::attention_fwd(q, ke, ve, out, lse);
      Tensor dq = q.empty_like(), dke = q.empty_like(), dve = q.empty_like();
      cpu::attention_bwd(q, ke, ve, out, lse, g, dq, dke, dve);

      Ring r = ring_forward(cuda_of(q, dt), cuda_of(k, dt), cuda_of(v, dt), cuda_of(g, dt), N);
      std::vector<double> ring_out(static_cast<size_t>(B * H * T * D), 0.0);
      for (const Rank& st : r.ranks)
        for (int i = 0; i < 2; ++i) add_chunk(ring_out, st.out[i], st.chunk[i], r.C, T);
      EXPECT_LE(rel_err(ring_out, out.to_double()), tol_of(dt)) << "out";
      Grads gr = ring_backward(r, Hkv);
      EXPECT_LE(rel_err(gr.dq, dq.to_double()), tol_of(dt)) << "dq";
      EXPECT_LE(rel_err(gr.dk, reduce_heads(dke, Hkv)), tol_of(dt)) << "dk";
      EXPECT_LE(rel_err(gr.dv, reduce_heads(dve, Hkv)), tol_of(dt)) << "dv";
      if (C == 128 && cudnn_built() && attention_backend() != AttentionBackend::Flash)
        EXPECT_GT(st::ops::cuda::cudnn_sdpa_calls(), calls) << "the blocks did not run on cuDNN: " << st::ops::cuda::cudnn_sdpa_status();
    }
  }
}

TEST(GpuRingAttention, UnsupportedCasesAreDeviceErrors) {
  // the flash kernels take f16/bf16 at head dim 64 with Tq = Tk; the CPU op takes the rest
  // (under the flash backend: a later cuDNN may take head dim 32)
  with_backend(AttentionBackend::Flash, [] {
    Tensor q32 = Tensor::zeros({1, 2, 64, 64}, DType::f32, Device::cuda);
    EXPECT_THROW(block_attention_fwd(q32, q32, q32, BlockMask::full), DeviceError);
    Tensor q = Tensor::zeros({1, 2, 64, 32}, DType::bf16, Device::cuda);
    EXPECT_THROW(block_attention_fwd(q, q, q, BlockMask::causal), DeviceError);
    Tensor qa = Tensor::zeros({1, 2, 64, 64}, DType::bf16, Device::cuda),
           kb = Tensor::zeros({1, 2, 128, 64}, DType::bf16, Device::cuda);
    EXPECT_THROW(block_attention_fwd(qa, kb, kb, BlockMask::full), DeviceError);
  });
}
