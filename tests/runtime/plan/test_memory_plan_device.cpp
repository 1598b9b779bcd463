// The memory planner on the run's device (runtime/plan/memory_plan.h, --device): a GPT block's
// saved tensors per token written out here from the ops' code and compared with
// block_activations (GPT-2's block and the grouped-query one), on the CPU (what test_memory_plan holds to the allocator) and on CUDA,
// whose f16/bf16 paths fuse the GEMMs' bias and GELU epilogues and, at head size 64, run packed
// flash / cuDNN attention that keeps only its (B, T, A) output and the (B, H, T) f32 log-sum-exp.
// No path keeps a T×T tensor: the activations of B·T tokens are the same whatever T (checked
// on both devices). And the CUDA plan against the H200's measured peaks of the 1.56 B GPT
// (docs/PERFORMANCE.md, "The seed's two 24 GB cards": launch/gpu/run_memory_gpu.sh xl-cap at
// 26cecfb), within the planner's 5 %; the CPU plan of the same runs is 4.6-9.8 % over them.
#include <gtest/gtest.h>

#include "runtime/plan/memory_plan.h"
#include "runtime/setup/model_registry.h"

using namespace st;
using namespace st::runtime;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// The unfused head (--chunked-head 0): its logits terms are what these closed forms hold, and the
// H200 rows below were measured with it (the chunked head's terms: tests/runtime/train/test_chunked_head.cpp).
TrainConfig gpt(int64_t C, int64_t H, int64_t V, int64_t T) {
  TrainConfig c;
  c.model = "gpt";
  c.layers = 2, c.d_model = C, c.heads = H, c.vocab = V, c.seq_len = T, c.micro_batch = 1;
  c.chunked_head = false;
  return c;
}

// (r·C + a·A + f·F)·e + (4 + H/tp)·4: r (B,T,C), a (B,T,A), f (B,T,F) tensors kept, A = C/tp, F = 4C/tp.
double block(double r, double a, double f, double C, double H, double tp, double e) {
  return (r * C + a * C / tp + f * 4 * C / tp) * e + (4 + H / tp) * 4;
}

// GPT-2's block as the description gives it: LayerNorm, learned positions, H key/value heads, 4C.
DecoderShape gpt2_shape(int64_t C, int64_t H) {
  DecoderShape s;
  s.d_model = C, s.heads = H, s.kv_heads = H, s.head_dim = C / H, s.ffn = 4 * C;
  return s;
}

}  // namespace

// The grouped-query block (Llama: RMSNorm, rope, Hkv < H, SwiGLU, no biases), on every device:
// norm1's output, o's output, norm2's sum and output, down's output, the block's output (r 6;
// tp > 1: + the row-parallel GEMMs' partial sums, 8); the packed q/k/v (A + 2A_kv) and the attention's output A; [gate|up]
// 2F and their product F; the rstd of the two RMSNorms and the log-sum-exp of the H/tp heads; the
// concatenated [q|k|v] and [gate|up] weights kept per micro-batch, over its tokens.
TEST(MemoryPlanDevice, GroupedQueryBlockTerms) {
  DecoderShape s;
  s.d_model = 2048, s.heads = 32, s.kv_heads = 8, s.head_dim = 64, s.ffn = 8192;
  s.swiglu = s.rmsnorm = s.rotary = true;
  s.tied_head = true;
  const double tokens = 4096;
  for (Device dev : {Device::cpu, Device::cuda})
    for (int64_t tp : {1, 2, 4})
      for (Precision p : {Precision::fp32, Precision::bf16}) {
        const double e = p == Precision::fp32 ? 4 : 2, t = static_cast<double>(tp);
        const double C = 2048, A = 2048 / t, Akv = 512 / t, F = 8192 / t, H = 32 / t;
        const BlockActivations b = block_activations(s, tp, p, dev, tokens);
        EXPECT_TRUE(b.packed_attention);
        const double want = ((tp > 1 ? 8 : 6) * C + (2 * A + 2 * Akv) + 3 * F) * e + (2 + H) * 4 +
                            ((A + 2 * Akv) * C + 2 * F * C) * e / tokens;
        EXPECT_DOUBLE_EQ(b.bytes_per_token, want) << to_string(dev) << " tp " << tp;
      }
}

// Sequence parallelism: every (B, T, C) tensor the block keeps falls to T/tp positions — the norm
// / residual region's (GPT-2: ln_1, ln_2, h, the output, each projection's reduce-scatter and bias
// add, 8 of 10 under tp; grouped-query: 6 of 8), the column-parallel GEMMs' inputs (their
// T-shards, the norms' outputs, are kept and gathered again in the backward: no gathered copy) —
// and the row-parallel partial sums (2 of tp's 10 / 8) are not kept at all (the GEMM and its
// reduce-scatter one node, runtime/parallel/sp_linear.h); the norms' statistics fall by tp; the
// GPT-2 block's unfused c_attn and c_fc keep no pre-bias product (the column node adds the bias);
// nothing else changes (fp8: the separate nodes, r = 4 + 8/tp as before). The allocator holds
// these counts in test_memory_plan ("tp 2 sp", "llama tp 2 sp", "tp 2 pp 2 sp m 4", and
// SequenceParallelKeepsOneTpthOfTheRegion).
TEST(MemoryPlanDevice, SequenceParallelSplitsTheNormAndResidualRegion) {
  DecoderShape q;
  q.d_model = 2048, q.heads = 32, q.kv_heads = 8, q.head_dim = 64, q.ffn = 8192;
  q.swiglu = q.rmsnorm = q.rotary = true;
  for (int64_t tp : {2, 4, 8})
    for (Precision p : {Precision::fp32, Precision::bf16}) {
      const double t = static_cast<double>(tp), e = p == Precision::fp32 ? 4 : 2;
      const BlockActivations g = block_activations(gpt2_shape(768, 12), tp, p, Device::cpu);
      const BlockActivations gs = block_activations(gpt2_shape(768, 12), tp, p, Device::cpu, 0, true);
      EXPECT_DOUBLE_EQ(gs.replicated, 8 / t);
      // the region's 8 tensors / tp, the 2 partial sums gone
      EXPECT_DOUBLE_EQ(g.replicated - gs.replicated, 10 - 8 / t);
      // + c_attn's and c_fc's pre-bias products on the CPU (3A + F): the column node adds the bias inside
      EXPECT_DOUBLE_EQ(g.bytes_per_token - gs.bytes_per_token,
                       (10 - 8 / t) * 768 * e + 4 * (1 - 1 / t) * 4 + (3 * 768 + 3072) / t * e);
      EXPECT_DOUBLE_EQ(gs.attention, g.attention - 3);
      EXPECT_DOUBLE_EQ(gs.mlp, g.mlp - 1);
      // CUDA bf16's fused epilogues keep no pre-bias product either way: the region alone
      if (p == Precision::bf16) {
        EXPECT_DOUBLE_EQ(block_activations(gpt2_shape(768, 12), tp, p, Device::cuda).bytes_per_token -
                             block_activations(gpt2_shape(768, 12), tp, p, Device::cuda, 0, true).bytes_per_token,
                         (10 - 8 / t) * 768 * e + 4 * (1 - 1 / t) * 4);
      }
      // fp8 keeps the separate gather / reduce-scatter nodes: the gathered inputs and partial sums stay
      EXPECT_DOUBLE_EQ(block_activations(gpt2_shape(768, 12), tp, Precision::fp8, Device::cpu, 0, true).replicated,
                       4 + 8 / t);
      const BlockActivations l = block_activations(q, tp, p, Device::cpu, 4096);
      const BlockActivations ls = block_activations(q, tp, p, Device::cpu, 4096, true);
      EXPECT_DOUBLE_EQ(ls.replicated, 6 / t);
      EXPECT_DOUBLE_EQ(l.bytes_per_token - ls.bytes_per_token, (8 - 6 / t) * 2048 * e + 2 * (1 - 1 / t) * 4);
    }
  // tp 1: sequence parallelism has no effect
  EXPECT_DOUBLE_EQ(block_activations(gpt2_shape(768, 12), 1, Precision::fp32, Device::cpu, 0, true).bytes_per_token,
                   block_activations(gpt2_shape(768, 12), 1, Precision::fp32, Device::cpu).bytes_per_token);
}

TEST(MemoryPlanDevice, BlockTermsAreTheOpsClosedForms) {
  // CPU, any precision: ln_1, ln_2, h, the output, and both projections' GEMM + bias add (tp > 1:
  // + the all-reduce each) = 8 (10); c_attn's GEMM and bias add 6A, q, k, v reshaped and made
  // head-major 6A, the attention's output and the heads joined 2A = 14; c_fc's GEMM and bias add,
  // GELU = 3F. CUDA f32 (no fused epilogues): the same, but at tp 1 the packed attention reads q,
  // k, v inside c_attn's output and keeps its output (6A + A = 7)
  for (Device dev : {Device::cpu, Device::cuda})
    for (int64_t tp : {1, 2, 4}) {
      const BlockActivations b = block_activations(gpt2_shape(768, 12), tp, Precision::fp32, dev);
      const bool packed = dev == Device::cuda && tp == 1;
      EXPECT_DOUBLE_EQ(b.bytes_per_token, block(tp > 1 ? 10 : 8, packed ? 7 : 14, 3, 768, 12, tp, 4))
          << to_string(dev) << " tp " << tp;
      EXPECT_EQ(b.packed_attention, packed);
    }
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    EXPECT_DOUBLE_EQ(block_activations(gpt2_shape(768, 12), 1, p, Device::cpu).bytes_per_token, block(8, 14, 3, 768, 12, 1, 2));
    // CUDA f16/bf16, head size 64 (C 768, 12 heads): the fused projections are one tensor each
    // (r 6), c_attn's output 3A + the packed attention's output A = 4, c_fc's fused output and
    // GELU's = 2F. Under tp the row-parallel GEMM, all-reduce and bias add stay (r 10) and the
    // block composes its attention (TpSelfAttention: 3A + 8A = 11) whatever the head size.
    for (int64_t tp : {1, 2}) {
      const BlockActivations b = block_activations(gpt2_shape(768, 12), tp, p, Device::cuda);
      EXPECT_EQ(b.packed_attention, tp == 1);
      EXPECT_DOUBLE_EQ(b.attention, tp == 1 ? 4 : 11);
      EXPECT_DOUBLE_EQ(b.bytes_per_token, block(tp > 1 ? 10 : 6, tp == 1 ? 4 : 11, 2, 768, 12, tp, 2)) << "tp " << tp;
    }
    // head size 80 (C 1600, 20 heads): packed too (any head size up to 128 since dbd1960)
    const BlockActivations b80 = block_activations(gpt2_shape(1600, 20), 1, p, Device::cuda);
    EXPECT_TRUE(b80.packed_attention);
    EXPECT_DOUBLE_EQ(b80.attention, 4);
    EXPECT_DOUBLE_EQ(b80.bytes_per_token, block(6, 4, 2, 1600, 20, 1, 2));
    // head size 160 (C 1600, 10 heads): past the CUDA-core kernels' 128, composed again
    EXPECT_FALSE(block_activations(gpt2_shape(1600, 10), 1, p, Device::cuda).packed_attention);
  }
}

// The attention term has no T×T part: one micro-batch of 4 × 256 tokens and one of 1 × 1024 plan
// the same activations (the per-token terms times B·T), on the CPU and on CUDA.
TEST(MemoryPlanDevice, NoTermGrowsWithTheSequenceLength) {
  for (Device dev : {Device::cpu, Device::cuda}) {
    // V 4096: the loss's moment is the stage's largest (its logits and their gradient outweigh a
    // block's backward, 52·C bytes a token)
    TrainConfig a = gpt(256, 4, 4096, 256), b = gpt(256, 4, 4096, 1024);
    a.micro_batch = 4;
    a.precision = b.precision = Precision::bf16;
    a.device = b.device = dev;
    const MemoryPlan pa = plan_memory(model_entry(a), 256, plan_layout(a, 1));
    const MemoryPlan pb = plan_memory(model_entry(b), 1024, plan_layout(b, 1));
    const double C = 256, H = 4, V = 4096, e = 2;
    // the positions' table (wpe) grows with the context, so only the activations are compared
    EXPECT_DOUBLE_EQ(pa.stages[0].activations, pb.stages[0].activations) << to_string(dev);
    // and they are the closed form: 2 blocks + the embedding + the loss at the end of the forward
    const bool cuda = dev == Device::cuda;
    const double l = cuda ? e : e + 4;
    const double per_token = 2 * (cuda ? block(6, 4, 2, C, H, 1, e) : block(8, 14, 3, C, H, 1, e)) + C * e +
                             (V * l + (C + 2) * 4) + (V * l + (C + 5) * 4);
    EXPECT_DOUBLE_EQ(pb.stages[0].activations, 1024 * per_token) << to_string(dev);
  }
}

// GPT-2 small shapes (12 blocks, C 768, 12 heads of 64, V 50257, AdamW, 8 × 1024 tokens) on the
// H200 at 94a899e (2026-12-04, launch/gpu/run_memory_gpu.sh plan, one H200, ranks through the MPI
// backend): each run's largest allocator peak (MiB). The CUDA plan within 5 % (they are within
// 0.1 %, the bf16 row's chunked-head terms and the fp32 row's packed attention being the ones this
// measurement corrected), the CPU plan of the same flags not. (The 1.56 B GPT's rows of
// docs/memory.md were measured before attention was packed for every head size, and are not held
// here: that model's attention is now the packed one.)
TEST(MemoryPlanDevice, CudaPlanMatchesTheH200Measurements) {
  struct Row {
    const char* name;
    Precision precision;
    int64_t dp, zero;
    bool chunked_head;
    double measured;
  };
  const Row rows[] = {{"bf16, chunked head", Precision::bf16, 1, 0, true, 4589.7},
                      {"fp32, chunked head", Precision::fp32, 1, 0, true, 9596.8},
                      {"bf16 dp 2 zero 3", Precision::bf16, 2, 3, false, 5241.3}};
  TrainConfig c = gpt(768, 12, 50257, 1024);
  c.layers = 12;
  c.micro_batch = 8;
  double cpu_worst = 0;
  for (const Row& r : rows) {
    c.precision = r.precision, c.dp = r.dp, c.zero = r.zero, c.chunked_head = r.chunked_head;
    c.device = Device::cuda;
    const double cuda = plan_memory(model_entry(c), 1024, plan_layout(c, r.dp)).max_peak() / kMiB;
    c.device = Device::cpu;
    const double cpu = plan_memory(model_entry(c), 1024, plan_layout(c, r.dp)).max_peak() / kMiB;
    EXPECT_NEAR(cuda / r.measured, 1.0, 0.05) << r.name << ": cuda plan " << cuda << " MiB, measured " << r.measured;
    cpu_worst = std::max(cpu_worst, cpu / r.measured);
    std::printf("%-20s measured %8.1f MiB  plan cuda %8.1f (%.3f)  cpu %8.1f (%.3f)\n", r.name, r.measured, cuda,
                cuda / r.measured, cpu, cpu / r.measured);
  }
  EXPECT_GT(cpu_worst, 1.05) << "the CPU plan fits the GPU too: the device term tests nothing";
}
