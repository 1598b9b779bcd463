// The memory planner's activation closed form (see activation_bytes.h and memory_plan.h).
#include "runtime/plan/activation_bytes.h"

#include <algorithm>

#include "ops/lm_head_loss.h"

namespace st::runtime {

bool classic_block(const DecoderShape& s) { return !s.rotary && s.kv_heads == s.heads && !s.swiglu; }

BlockActivations block_activations(const DecoderShape& shape, int64_t tp, Precision precision, Device device,
                                   double tokens, bool sequence_parallel) {
  const bool sp = sequence_parallel && tp > 1;
  const double C = static_cast<double>(shape.d_model), t = static_cast<double>(tp);
  const double D = static_cast<double>(shape.head_dim > 0 ? shape.head_dim : shape.d_model / std::max<int64_t>(shape.heads, 1));
  const double H = static_cast<double>(shape.heads) / t, Hkv = static_cast<double>(shape.kv_heads > 0 ? shape.kv_heads : shape.heads) / t;
  const double A = H * D, Akv = Hkv * D, F = static_cast<double>(shape.ffn > 0 ? shape.ffn : 4 * shape.d_model) / t;
  const DType dt = precision_policy(precision).compute;
  const double e = static_cast<double>(dtype_size(dt));
  BlockActivations b;
  // the norms' f32 statistics per token: LayerNorm mean and rstd, RMSNorm rstd; two per block (sp: T/tp of them)
  const double norm_stats = (shape.rmsnorm ? 2 : 4) / (sp ? t : 1.0);
  // fp8: each GEMM's E4M3 weight (1 byte an element: qkv, o, up (SwiGLU: gate|up), down; 12·C²/tp
  // for GPT-2's four) kept for its backward's dgrad, per micro-batch in flight: per token of it
  const double fp8_weights = precision == Precision::fp8 && tokens > 0
                                 ? ((A + 2 * Akv) * C + A * C + (shape.swiglu ? 2 : 1) * F * C + F * C) / tokens
                                 : 0;
  if (classic_block(shape)) {
    // multi-head attention without rope, GELU MLP with biases: the GPT-2 block (DecoderBlock's
    // packed c_attn, the composed attention under tp, ops::mlp_gelu at tp 1)
    // the fused CUDA paths exist for f16/bf16 only (ops/matmul.cpp, ops/mlp.cpp, ops/attention.cpp)
    const bool fused = device == Device::cuda && dt != DType::f32;
    // ops::causal_attention_qkv on CUDA reads q, k, v in place for every dtype and head size up to
    // 128 (cuDNN, the flash kernels or the CUDA-core ones: ops/cuda/attention.cu); the
    // tensor-parallel block composes its attention from ops::causal_attention
    b.packed_attention = device == Device::cuda && D <= 128 && tp == 1;
    // replicated (B, T, C) tensors: ln_1's and ln_2's outputs, the residual h, the block's output,
    // and each output projection: c_proj's GEMM and its bias add (tp > 1: the GEMM, its all-reduce,
    // the bias add, in attention and in the MLP); a fused tp-1 projection is one tensor
    b.replicated = tp > 1 ? 10 : fused ? 6 : 8;
    // sequence parallel: all eight on T/tp positions, no gathered inputs or partial sums kept
    // (memory_plan.h's block_activations); FP8 keeps the separate gather / reduce-scatter nodes,
    // so its GEMMs' gathered inputs and partial sums stay whole
    if (sp) b.replicated = precision == Precision::fp8 ? 4 + 8 / t : 8 / t;
    // (B, T, A) tensors: c_attn's output (3A; unfused also its GEMM before the bias, 3A); the
    // composed attention's reshape and head-major copies of q, k, v (6A), its output and the heads
    // joined (2A); the packed kernels read q, k, v inside c_attn's output and keep one (B, T, A)
    b.attention = (fused ? 3 : 6) + (b.packed_attention ? 1 : 8);
    // (B, T, F) tensors: c_fc's output (unfused also its GEMM before the bias) and GELU's
    b.mlp = fused ? 2 : 3;
    // sequence parallel without FP8: c_attn and c_fc are sp_column_linear nodes, which add their
    // bias inside the node (runtime/parallel/sp_linear.h), so no pre-bias product is kept (−3A, −F),
    // as with the fused CUDA epilogues
    if (sp && !fused && precision != Precision::fp8) {
      b.attention -= 3;
      b.mlp -= 1;
    }
    double fp8_copies = 0;
    if (precision == Precision::fp8) {
      // the blocks' GEMMs through ops::fp8_linear: each keeps its input's E4M3 transpose (1 byte an
      // element: C for qkv and up, A for o, F for down) beside the input itself (its autograd
      // edge), and adds its bias in the forward outside autograd, so an unfused bias add keeps no
      // second tensor: on the CPU c_attn's output counts once (−3A), the MLP is up → GELU → down
      // with the bias adds gone (−1 F; at tp 1 also the two output projections' pre-bias
      // products: −2 C; tp > 1 adds the row-parallel bias after the all-reduce, as before).
      // CUDA's fused bf16 path already keeps one tensor per projection: the same counts.
      // The MLP is one node (ops::fp8_mlp): it keeps c_fc's output and GELU's output's E4M3
      // transpose, not GELU's output (−1 F).
      fp8_copies = 2 * C + A + F;
      b.mlp -= 1;
      if (!fused) {
        b.attention -= 3;
        b.mlp -= 1;
        if (tp == 1) b.replicated -= 2;
      }
    }
    b.bytes_per_token =
        (b.replicated * C + b.attention * A + b.mlp * F) * e + (norm_stats + H) * 4 + fp8_copies + fp8_weights;
    return b;
  }
  // the grouped-query block (DecoderBlock with rotary positions or fewer key/value heads, no
  // biases): q, k, v as one GEMM of their concatenated weights, the packed attention (every
  // device: ops::causal_attention_qkv's kernels read q, k, v and rotate them in place)
  b.packed_attention = true;
  // (B, T, C): norm1's output, o's output, norm2's residual sum and output, down's output, the
  // block's output (each op's inputs stay with its node until its backward); under tp also the
  // row-parallel GEMMs' partial sums beside their all-reduced copies (o and down)
  b.replicated = tp > 1 ? 8 : 6;
  // sequence parallel: all six on T/tp positions (memory_plan.h's block_activations); FP8 keeps
  // the gathered inputs and the partial sums (its separate gather / reduce-scatter nodes)
  if (sp) b.replicated = precision == Precision::fp8 ? 4 + 6 / t : 6 / t;
  // the packed q/k/v (A + 2·A_kv) and the attention's output (A), counted in units of A
  b.attention = (A + (A + 2 * Akv)) / std::max(A, 1.0);
  // SwiGLU: [gate | up] (2F) and silu(gate)·up (F); GELU: the up projection and GELU's output —
  // but the FP8 MLP is one node (ops::fp8_mlp), which keeps the activation's E4M3 transpose (in
  // fp8_copies) instead of its output (−1 F)
  b.mlp = (shape.swiglu ? 3 : 2) - (precision == Precision::fp8 ? 1 : 0);
  // the concatenated weights the two GEMMs keep for their backward ([q|k|v]ᵀ and [gate|up]ᵀ, made
  // per micro-batch in the forward): per token of a micro-batch of `tokens`
  const double cat_weights = ((A + 2 * Akv) * C + (shape.swiglu ? 2 * F * C : 0)) * e;
  // fp8: each GEMM input's E4M3 copy (C for q|k|v and gate|up, A for o, F for down)
  const double fp8_copies = precision == Precision::fp8 ? 2 * C + A + F : 0;
  b.bytes_per_token = (b.replicated * C + b.attention * A + b.mlp * F) * e + (norm_stats + H) * 4 +
                      (tokens > 0 ? cat_weights / tokens : 0) + fp8_copies + fp8_weights;
  return b;
}

HeadLossBytes head_loss_bytes(double C, double V, const PlanLayout& l, double tokens) {
  const double e = static_cast<double>(dtype_size(l.policy().compute));
  if (head_is_chunked(l)) {  // ops/lm_head_loss.h; its CPU chunk buffer is f32
    const double rows =
        std::min(tokens, static_cast<double>(ops::lm_head_chunk_rows(static_cast<int64_t>(V), l.policy().compute)));
    HeadLossBytes h;
    // dh and dw in f32, ln_f's saved input and statistics, its output (held by the loss's node)
    h.saved = C * 4 + V * C * 4 / tokens + (C * e + 2 * 4) + C * e;
    // one chunk of logits and the token batch: on CUDA the chunk is in e and the GEMMs read e
    // (ops/cuda/lm_head_loss.cu); the CPU's chunk is f32, and under fp16/bf16 it widens wte and the
    // chunk of h (the H200 at 94a899e: GPT-2 small bf16, 8 × 1024 tokens, measured 4 590 MiB
    // against 4 863 planned with the CPU's terms: 273 MiB, these two)
    h.transient = l.device == Device::cuda ? rows * V * e / tokens + 4 * 4
                                           : rows * V * 4 / tokens + 4 * 4 + (e == 4 ? 0 : (V + rows) * C * 4 / tokens);
    // the token batch; fp16/bf16: dh, dw cast to e in place of their f32 buffers
    h.backward = 4 * 4 - (4 - e) * (C + V * C / tokens);
    h.grad = V * C * e;
    return h;
  }
  return {};  // the unfused head: decoder_activations' logits terms
}

ActivationCoefficients decoder_activations(const DecoderShape& shape, double V, const PlanLayout& l, double tokens) {
  ActivationCoefficients a;
  const double C = static_cast<double>(shape.d_model);
  const double tp = static_cast<double>(l.tp), e = static_cast<double>(dtype_size(l.policy().compute));
  const bool sp = l.sequence_parallel && l.tp > 1;
  const double shard = sp ? static_cast<double>(l.tp) : 1.0;  // the residual stream's share of T
  a.block = block_activations(shape, l.tp, l.precision, l.device, tokens, sp).bytes_per_token;
  a.block_recompute = C * e / shard;
  // the replay's moment: the replayed block and its backward's transient — 5·C·4 for the GPT-2
  // block; the grouped-query block's backward has freed two of its (B, T, C) tensors by its peak
  // (measured on the CPU in fp32: np 1, C 64, 4 blocks, 256 tokens, within 0.5 %); under tp one
  // fewer (C 64, 2 blocks, 128 tokens, tp 2 and 4: 4·C·4 within 1.5 % of the peak, 5·C·4 over by 3-5 %)
  a.replay = a.block + ((classic_block(shape) ? 5 : 3) - (l.tp > 1 ? 1 : 0)) * C * 4;
  // measured on the CPU: 12·C bytes in fp32; 52·C in fp16/bf16, where the CPU kernels stage
  // operands in f32 (kept for CUDA: not measured there on a stage without the loss)
  // a block's backward at its start: its last GEMM's weight gradient made (the MLP's down
  // projection, F/tp × C: the first weight gradient of the block), a temporary in e — on the CPU
  // in fp16/bf16 also its f32 product, cast (the CPU kernels stage bf16 operands in f32) — beside
  // the .grad it is copied into; and per token the gradients' buffers beyond what the block
  // saved: measured on the CPU (C 64, 256 tokens) 12·C bytes in fp32, 52·C in fp16/bf16 with
  // that weight's temporaries, 8·C and 46·C without them (kept for CUDA: not measured there on a
  // stage without the loss)
  const double wt = l.device == Device::cpu && e != 4 ? 4 + e : e;  // a weight gradient's temporary, bytes an element
  {
    const double t = static_cast<double>(l.tp);
    const double Ddim = static_cast<double>(shape.head_dim > 0 ? shape.head_dim : shape.d_model / std::max<int64_t>(shape.heads, 1));
    const double A = static_cast<double>(shape.heads) / t * Ddim,
                 Akv = static_cast<double>(shape.kv_heads > 0 ? shape.kv_heads : shape.heads) / t * Ddim;
    const double F = static_cast<double>(shape.ffn > 0 ? shape.ffn : 4 * shape.d_model) / t;
    a.block_start_weight = F * C;   // elements
    a.block_end_weight = (A + 2 * Akv) * C;  // c_attn (3C·C/tp) / [q|k|v], elements
    // measured on the CPU in fp32 (GPT, C 32, T 256, cp 2 and 4): the activation peak per rank
    // 1.067 × 1/cp of cp 1's, these 640 bytes a token (tests/runtime/train/test_layouts_cp.cpp)
    if (l.cp > 1) a.ring = 2 * 2 * Akv * e + A * 4;
  }
  a.weight_temp = wt;
  a.block_backward = (e == 4 ? 8 : 46) * C;
  // fp8: the MLP is one node (ops::fp8_mlp), which holds what it saved (the activation's E4M3
  // transpose among it) until its whole backward ends, while the activation's gradient is made and
  // cast beside the output's: measured on the CPU (GPT, C 64, F 256, 256 tokens) 2.5·F more
  if (l.precision == Precision::fp8)
    a.block_backward += 2.5 * static_cast<double>(shape.ffn > 0 ? shape.ffn : 4 * shape.d_model) / static_cast<double>(l.tp);
  // cp > 1: a block's ring backward holds as much beside it — [k | v] held and arriving, and the
  // f32 gradient accumulators that travel with them (the same measured peak)
  a.block_backward += a.ring;
  // the end of a block's backward, its first GEMM's weight gradient made (the block's last but
  // the first norm's): the block's input and the first norm's output and statistics, the
  // gradient flowing into the GEMM (q|k|v) and out of it, the residual's gradient; measured on
  // the CPU in fp32: 9·C·4 + 8 for the GPT-2 block (pp 4 1F1B, C 256, 32 tokens)
  a.block_end = 9 * C * 4 + 8;
  a.embedding = C * e;
  // the logits (saved per micro-batch) and their gradient (once), each in e; on the CPU under
  // fp16/bf16 plus an f32 copy of each (its cross-entropy kernels work in f32; the CUDA ones read
  // and write e); ln_f's output and statistics saved, the loss's buffers
  const double l_bytes = l.device == Device::cpu && e != 4 ? e + 4 : e;
  a.embedding_grad = V / tp * C * l_bytes;  // the CPU stages it in f32 too under fp16/bf16
  if (head_is_chunked(l)) {  // no logits: the chunked head's own terms (ops/lm_head_loss.h)
    a.head = head_loss_bytes(C, V, l, tokens);
    a.loss_saved = a.head.saved;
    a.loss_transient = a.head.transient;
    return a;
  }
  a.logits = V / tp * l_bytes;
  a.loss_saved = a.logits + (C + 2) * 4;
  a.loss_transient = a.logits + (C + 5) * 4 + (l.tp > 1 ? 2 * C * 4 : 0);
  a.head_backward = V / tp * e + C * e;
  a.head_weight_grad = V / tp * C * e;
  return a;
}

}  // namespace st::runtime
