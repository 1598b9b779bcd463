// The memory planner's closed forms (see the header for every term and where it comes from).
#include "runtime/plan/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "ops/lm_head_loss.h"
#include "runtime/parallel/grad_reducer.h"
#include "runtime/parallel/parameter_sharding.h"
#include "runtime/parallel/tp_shard.h"
#include "runtime/pipeline/stage_model.h"
#include "runtime/plan/memory_check.h"
#include "runtime/setup/model_registry.h"
#include "tensor/memory_category.h"

namespace st::runtime {
namespace {

double numel(const Shape& s) {
  double n = 1;
  for (int64_t d : s) n *= static_cast<double>(d);
  return n;
}

// Elements of one layer a tp rank holds (its shards by the family's rule); a name already in
// `seen` (a weight tied to a layer of the same stage) counts once.
double layer_elements(const LayerInfo& layer, const ShardRule& rule, int64_t tp, std::set<std::string>& seen) {
  double n = 0;
  for (const auto& [name, shape] : layer.params)
    if (seen.insert(name).second)
      n += rule && tp > 1 ? numel(shard_shape(shape, rule(name), static_cast<int>(tp))) : numel(shape);
  return n;
}

// Multi-head attention without rope and a GELU MLP: the GPT-2 block's ops (DecoderBlock's packed
// c_attn, the composed attention under tp, ops::mlp_gelu at tp 1); else the grouped-query block.
bool classic_block(const DecoderShape& s) { return !s.rotary && s.kv_heads == s.heads && !s.swiglu; }

}  // namespace

BlockActivations block_activations(const DecoderShape& shape, int64_t tp, Precision precision, Device device,
                                   double tokens, bool sequence_parallel) {
  const bool sp = sequence_parallel && tp > 1;
  const double C = static_cast<double>(shape.d_model), t = static_cast<double>(tp);
  const double D = static_cast<double>(shape.head_dim > 0 ? shape.head_dim : shape.d_model / std::max<int64_t>(shape.heads, 1));
  const double H = static_cast<double>(shape.heads) / t, Hkv = static_cast<double>(shape.kv_heads > 0 ? shape.kv_heads : shape.heads) / t;
  const double A = H * D, Akv = Hkv * D, F = static_cast<double>(shape.ffn > 0 ? shape.ffn : 4 * shape.d_model) / t;
  const DType dt = compute_dtype(precision);
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
    if (sp) b.replicated = 4 + 8 / t;  // sequence parallel: the header of block_activations says which
    // (B, T, A) tensors: c_attn's output (3A; unfused also its GEMM before the bias, 3A); the
    // composed attention's reshape and head-major copies of q, k, v (6A), its output and the heads
    // joined (2A); the packed kernels read q, k, v inside c_attn's output and keep one (B, T, A)
    b.attention = (fused ? 3 : 6) + (b.packed_attention ? 1 : 8);
    // (B, T, F) tensors: c_fc's output (unfused also its GEMM before the bias) and GELU's
    b.mlp = fused ? 2 : 3;
    double fp8_copies = 0;
    if (precision == Precision::fp8) {
      // the blocks' GEMMs through ops::fp8_linear: each keeps its input's E4M3 transpose (1 byte an
      // element: C for qkv and up, A for o, F for down) beside the input itself (its autograd
      // edge), and adds its bias in the forward outside autograd, so an unfused bias add keeps no
      // second tensor: on the CPU c_attn's output counts once (−3A), the MLP is up → GELU → down
      // with the bias adds gone (−1 F; at tp 1 also the two output projections' pre-bias
      // products: −2 C; tp > 1 adds the row-parallel bias after the all-reduce, as before).
      // CUDA's fused bf16 path already keeps one tensor per projection: the same counts.
      fp8_copies = 2 * C + A + F;
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
  if (sp) b.replicated = 4 + 6 / t;  // sequence parallel: the header of block_activations says which
  // the packed q/k/v (A + 2·A_kv) and the attention's output (A), counted in units of A
  b.attention = (A + (A + 2 * Akv)) / std::max(A, 1.0);
  // SwiGLU: [gate | up] (2F) and silu(gate)·up (F); GELU: the up projection and GELU's output
  b.mlp = shape.swiglu ? 3 : 2;
  // the concatenated weights the two GEMMs keep for their backward ([q|k|v]ᵀ and [gate|up]ᵀ, made
  // per micro-batch in the forward): per token of a micro-batch of `tokens`
  const double cat_weights = ((A + 2 * Akv) * C + (shape.swiglu ? 2 * F * C : 0)) * e;
  // fp8: each GEMM input's E4M3 copy (C for q|k|v and gate|up, A for o, F for down)
  const double fp8_copies = precision == Precision::fp8 ? 2 * C + A + F : 0;
  b.bytes_per_token = (b.replicated * C + b.attention * A + b.mlp * F) * e + (norm_stats + H) * 4 +
                      (tokens > 0 ? cat_weights / tokens : 0) + fp8_copies + fp8_weights;
  return b;
}

namespace {

// The last stage's loss per token of a micro-batch of `tokens`: saved until its backward, the
// transient at the end of its forward (the header's "loss" and "chunked loss" terms) and, for the
// chunked head, its backward's moment: what it holds beyond the saved bytes while wte's gradient
// (`grad` bytes, when no gradient exists yet) is made from the one it hands out.
struct HeadLossBytes {
  double saved = 0, transient = 0, backward = 0, grad = 0;
};
HeadLossBytes head_loss_bytes(double C, double V, const PlanLayout& l, double tokens) {
  const double e = static_cast<double>(dtype_size(compute_dtype(l.precision)));
  if (head_is_chunked(l)) {  // ops/lm_head_loss.h; its CPU chunk buffer is f32
    const double rows =
        std::min(tokens, static_cast<double>(ops::lm_head_chunk_rows(static_cast<int64_t>(V), compute_dtype(l.precision))));
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

// Per token of a micro-batch, in bytes: a decoder's saved tensors (header), or 0 for a model
// without a decoder description.
struct ActivationCoefficients {
  double block = 0, block_recompute = 0, replay = 0, embedding = 0, loss_saved = 0, loss_transient = 0;
  double block_backward = 0;  // a block's backward beyond what it saved (its gradients' buffers)
  double block_end = 0;         // per token at the end of a block's backward (what is still held)
  double block_end_weight = 0;    // and, once, its first GEMM's weight gradient before .grad takes it (elements)
  double block_start_weight = 0;  // the first weight gradient its backward makes (its last GEMM's), elements
  double weight_temp = 0;         // bytes an element of a weight gradient's temporaries
  double logits = 0;          // of loss_saved: the logits, gone once the loss's backward ran
  double head_backward = 0;   // the head's backward: the logits' gradient and its input's (per token)
  double head_weight_grad = 0;  // and, once, its weight's gradient (V/tp · C · e bytes)
  double embedding_grad = 0;    // the embedding's gradient of the tied wte before it is added (bytes)
  HeadLossBytes head;           // the chunked head's terms (zeros for the unfused head)
};
ActivationCoefficients decoder_activations(const DecoderShape& shape, double V, const PlanLayout& l, double tokens) {
  ActivationCoefficients a;
  const double C = static_cast<double>(shape.d_model);
  const double tp = static_cast<double>(l.tp), e = static_cast<double>(dtype_size(compute_dtype(l.precision)));
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
  }
  a.weight_temp = wt;
  a.block_backward = (e == 4 ? 8 : 46) * C;
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

// ZeRO-3's gathered parameters on stage s, in elements (runtime/parallel/zero3.h): a unit per
// layer, a weight two of the stage's layers share a unit of its own, held gathered through the
// backward between them; at most two consecutive layers' units at once (the running one and the
// prefetched one), besides that tied weight.
struct Zero3Gathers {
  double gathered = 0, tied = 0, largest_unit = 0;
  std::vector<double> own;  // per layer of the stage, in order: its own unit (the tied weight apart)
};
Zero3Gathers zero3_gathers(const ModelDescription& d, const Partition& part, int s, const PlanLayout& l,
                           const ShardRule& rule) {
  std::vector<std::map<std::string, double>> layers;  // name → elements (a tp rank's shard)
  std::map<std::string, int> uses;
  for (const LayerRange& r : stage_chunks(part, s, static_cast<int>(l.pp)))
    for (int i = r.begin; i < r.end; ++i) {
      std::map<std::string, double> m;
      for (const auto& [name, shape] : d.layers[static_cast<size_t>(i)].params) {
        m[name] = rule && l.tp > 1 ? numel(shard_shape(shape, rule(name), static_cast<int>(l.tp))) : numel(shape);
        ++uses[name];
      }
      layers.push_back(std::move(m));
    }
  Zero3Gathers g;
  std::map<std::string, double> tied;
  for (const auto& m : layers)
    for (const auto& [name, n] : m)
      if (uses[name] > 1) tied[name] = n;
  for (const auto& [name, n] : tied) g.tied += n, g.largest_unit = std::max(g.largest_unit, n);
  for (size_t i = 0; i < layers.size(); ++i) {
    std::map<std::string, double> now = tied;
    double own = 0;
    for (const auto& [name, n] : layers[i]) now[name] = n, own += tied.count(name) ? 0 : n;
    if (i + 1 < layers.size()) now.insert(layers[i + 1].begin(), layers[i + 1].end());
    double sum = 0;
    for (const auto& [name, n] : now) sum += n;
    g.gathered = std::max(g.gathered, sum);
    g.largest_unit = std::max(g.largest_unit, own);
    g.own.push_back(own);
  }
  return g;
}

// The DP reducer's buckets over a stage's parameters (`sizes`: elements in registration order,
// a tied weight once), as GradReducer::lay_out cuts them: reverse registration order, the first
// bucket ≤ 1 MiB, the others ≤ --bucket-mb, and under ZeRO never two owners' parameters in one
// (Zero1: contiguous runs balanced by bytes, partition_balanced; fewer parameters than ranks:
// one each). `e` the gradients' bytes.
struct Buckets {
  double count = 0, largest = 0;  // buckets; the largest's elements
  double own = 0;                 // ZeRO: the largest owner's run, elements
};
Buckets reducer_buckets(const std::vector<double>& sizes, double e, const PlanLayout& l) {
  const int n = static_cast<int>(sizes.size()), dp = l.zero >= 1 ? static_cast<int>(l.dp) : 1;
  std::vector<int> owner(static_cast<size_t>(n), 0);
  if (dp > 1 && n >= dp) {
    std::vector<double> costs;
    for (double x : sizes) costs.push_back(x * e);
    const Partition part = partition_balanced(costs, dp);
    for (int r = 0; r < dp; ++r)
      for (int k = part.begin(r); k < (r + 1 < dp ? part.begin(r + 1) : n); ++k) owner[static_cast<size_t>(k)] = r;
  } else if (dp > 1) {
    for (int k = 0; k < n; ++k) owner[static_cast<size_t>(k)] = k;
  }
  Buckets b;
  std::map<int, double> runs;
  double bytes = 0, numel = 0, cap = 1024.0 * 1024;
  int head = -1;
  for (int k = n; k-- > 0;) {
    const double nb = sizes[static_cast<size_t>(k)] * e;
    runs[owner[static_cast<size_t>(k)]] += sizes[static_cast<size_t>(k)];
    if (head < 0 || bytes + nb > cap || owner[static_cast<size_t>(head)] != owner[static_cast<size_t>(k)]) {
      if (head >= 0) cap = l.bucket_mb * 1024 * 1024;
      b.count += 1, head = k, bytes = 0, numel = 0;
    }
    bytes += nb, numel += sizes[static_cast<size_t>(k)];
    b.largest = std::max(b.largest, numel);
  }
  for (const auto& [r, x] : runs) b.own = std::max(b.own, x);
  return b;
}

}  // namespace

PlanLayout plan_layout(const TrainConfig& cfg, int64_t dp) {
  PlanLayout l;
  l.dp = dp;
  l.tp = cfg.tp;
  l.pp = cfg.pp;
  l.zero = zero_stage_in_effect(cfg.zero, dp);
  l.schedule = cfg.schedule;
  l.virtual_stages = cfg.virtual_stages;
  l.micro_batch = cfg.micro_batch;
  l.grad_accum = cfg.grad_accum;
  l.recompute = cfg.recompute;
  l.precision = cfg.precision;
  l.grad_comm_dtype = cfg.grad_comm_dtype;
  l.optimizer = cfg.optimizer;
  l.partition = cfg.partition == PartitionKind::profile ? PartitionKind::params : cfg.partition;
  l.bucket_mb = cfg.bucket_mb;
  l.device = cfg.device;
  l.chunked_head = cfg.chunked_head;
  l.sequence_parallel = cfg.sequence_parallel == 1 && cfg.tp > 1;
  return l;
}

bool head_is_chunked(const PlanLayout& l) { return l.chunked_head && l.tp == 1 && l.zero < 3; }

double MemoryPlan::max_peak() const {
  double p = 0;
  for (const StageMemory& s : stages) p = std::max(p, s.peak);
  return p;
}

MemoryPlan plan_memory(const nlohmann::json& entry, int64_t seq_len, const PlanLayout& l) {
  MemoryPlan plan;
  const std::string family = entry.value("family", std::string());
  const ModelFactory& f = model_factory(family);
  const ModelDescription d = describe_model(entry, seq_len);
  const ShardRule rule = f.shard_rule && l.tp > 1 ? f.shard_rule(entry.at("config")) : ShardRule();
  const int pieces = static_cast<int>(l.pp * l.virtual_stages);
  const Partition part = choose_partition(l.partition, d, pieces);
  // activations from the model's decoder description (DecoderShape); none for another model
  const bool decoder = d.decoder.has_value();
  if (!decoder) plan.notes = "activations are modelled for decoder models only (0 here)";
  const ActivationCoefficients a =
      decoder ? decoder_activations(*d.decoder, static_cast<double>(d.vocab_size), l, static_cast<double>(l.micro_batch * seq_len))
              : ActivationCoefficients{};
  const ParamBytes pb = param_bytes(l.precision, l.optimizer);  // the same per-parameter bytes as the memory check
  const double e = pb.weight, master = pb.master, state = pb.state;
  const double dp = static_cast<double>(l.dp), tokens = static_cast<double>(l.micro_batch * seq_len);
  const double C = decoder ? static_cast<double>(d.decoder->d_model) : 0.0;
  const int last_layer = static_cast<int>(d.layers.size()) - 1;
  for (int s = 0; s < l.pp; ++s) {
    StageMemory m;
    m.stage = s;
    // per layer of the stage, in order: its elements and its saved bytes per token of one
    // micro-batch; `sizes` each parameter's elements in registration order (the DP buckets)
    std::vector<double> elems, saved, sizes;
    std::vector<bool> replayed, blocks;
    double tied_elems = 0;  // a weight two of the stage's layers share (the GPT's wte), elements
    bool holds_loss = false, holds_embedding = false;
    std::set<std::string> seen;
    for (const LayerRange& r : stage_chunks(part, s, static_cast<int>(l.pp)))
      for (int i = r.begin; i < r.end; ++i) {
        const LayerInfo& layer = d.layers[static_cast<size_t>(i)];
        for (const auto& [name, shape] : layer.params) {
          const double k = rule && l.tp > 1 ? numel(shard_shape(shape, rule(name), static_cast<int>(l.tp))) : numel(shape);
          if (!seen.count(name)) sizes.push_back(k);
          else tied_elems += k;  // its gradient is made at this later layer's backward already
        }
        elems.push_back(layer_elements(layer, rule, l.tp, seen));
        const bool block = i != 0 && i != last_layer;
        holds_loss = holds_loss || i == last_layer;
        holds_embedding = holds_embedding || i == 0;
        replayed.push_back(block && l.recompute);
        blocks.push_back(block);
        saved.push_back(i == 0 ? (l.recompute ? 0 : a.embedding) : !block ? 0 : l.recompute ? a.block_recompute : a.block);
      }
    const size_t L = elems.size();
    double elements = 0, saved_all = 0;
    for (size_t i = 0; i < L; ++i) elements += elems[i], saved_all += saved[i];
    const Zero3Gathers z3 = l.zero >= 3 ? zero3_gathers(d, part, s, l, rule) : Zero3Gathers{};
    // a stage before the last keeps its output per micro-batch for the backward of what it sent;
    // the last keeps the loss's saved tensors
    saved_all += s + 1 < l.pp ? C * e : 0;
    saved_all += holds_loss ? a.loss_saved : 0;
    // a later stage's received input is its first block's saved input; a stage of the Llama head
    // alone keeps it for the final RMSNorm's backward beside the norm's output the loss counts
    // (measured: pp 4 GPipe m 4, C 32, its last stage; GPT-2's head stage is exact without it)
    saved_all += s > 0 && L > 0 && !blocks[0] && decoder && !classic_block(*d.decoder) ? C * e : 0;
    const double comm_e = static_cast<double>(dtype_size(compute_dtype(l.grad_comm_dtype)));
    m.params = elements * e * (l.zero >= 3 ? 1 / dp : 1) + z3.gathered * e;
    // ZeRO-3 (runtime/parallel/zero3.h): beside the shards, the tied weight's full gradient (made
    // in the head's backward, held to the embedding's), the full gradients of the unit whose
    // backward runs, and the unit reduced before it still in flight — its comm buffer and
    // received shard in the comm dtype — until this unit's own reduce completes it (then the
    // received shard cast to e when the comm dtype differs)
    auto z3_in_flight = [&](double unit) { return unit * (1 + 1 / dp) * comm_e; };
    const double z3_shards = elements * e / dp;
    const double z3_backward =
        l.zero >= 3 ? (z3.tied + z3.largest_unit) * e + z3_in_flight(z3.largest_unit) +
                          (comm_e != e ? z3.largest_unit / dp * e : 0)
                    : 0;
    // the DP reducer (zero < 3): its buckets (grad_reducer.h), cut by owner under ZeRO-1/2
    const Buckets bk = l.dp > 1 && l.zero < 3 ? reducer_buckets(sizes, e, l) : Buckets{};
    // ZeRO-2 (shard_gradients): a rank keeps its own run's buckets; another owner's gradients are
    // the engine's while backward makes them (with grad-accum > 1 all of them, kept to the last
    // micro-batch), then a bucket of their own while reduced, kShardWindow at most in flight.
    // Beside its own run a rank so holds, once backward has made gradients for other owners:
    // the window's buckets, the one launching with the engine's gradients copied into it, and
    // the tied wte's gradient (made at the head, its bucket final only at the embedding); with a
    // comm dtype of its own the cast buffers stand in for the window (two buckets in all beside
    // them), and only around a bucket's launch: by the next block's backward its reduce is done
    // (the cast path) — without the cast the buffers stay until a later hook retires them.
    // Measured on the CPU: C 64 fp32 dp 4 (window + 1), C 256 bf16 over f32 dp 4 (2).
    const double z2_own = l.zero == 2 ? bk.own * e : 0;
    const bool z2_cast = compute_dtype(l.grad_comm_dtype) != compute_dtype(l.precision);
    const double z2_window = z2_cast ? 2 : static_cast<double>(kShardWindow) + 1;
    const double z2_backward =
        l.grad_accum > 1 ? elements * e : z2_own + std::min(elements - bk.own, z2_window * bk.largest + tied_elems) * e;
    m.grads = l.zero >= 3 ? z3_shards + z3_backward : l.zero == 2 ? z2_backward : elements * e;
    m.optim = elements * (master + state) * (l.zero >= 1 ? 1 / dp : 1);
    m.in_flight = l.pp > 1 ? in_flight_bound(l.schedule, s, static_cast<int>(l.pp), static_cast<int>(l.grad_accum),
                                             static_cast<int>(l.virtual_stages))
                           : 1;
    const double chunk_share = l.virtual_stages > 1 ? 1.0 / static_cast<double>(l.virtual_stages) : 1.0;
    const double n = static_cast<double>(m.in_flight) * chunk_share;  // micro-batches' worth of this stage held
    // the reducer's cast buffers, made with its buckets: min(2, buckets) of the largest bucket
    if (l.dp > 1 && l.zero < 3 && compute_dtype(l.grad_comm_dtype) != compute_dtype(l.precision))
      m.comm_dp = std::min(2.0, bk.count) * bk.largest * comm_e;
    // p2p: the gradient of its output, received ((B, T/tp, C) under sequence parallelism)
    if (l.pp > 1 && s + 1 < l.pp) m.comm_p2p = tokens * C * e / (l.sequence_parallel && l.tp > 1 ? l.tp : 1);
    m.comm = m.comm_dp + m.comm_p2p;
    // an earlier micro-batch's backward ran before the forward's peak: without a pipeline, or
    // under 1F1B / interleaved once the micro-batches outnumber those in flight (GPipe runs
    // every forward first)
    const bool accumulated = l.grad_accum > 1 && (l.pp == 1 || (l.schedule != Schedule::gpipe && l.grad_accum > m.in_flight));
    const double fixed = m.params + m.optim + m.comm;
    // each moment: its activations and the gradients in existence then; the peak is the largest
    m.activations = 0, m.peak = 0;
    // ZeRO-3's gathered units while layer j's backward runs: its own, the one before it
    // (prefetched) and the tied weight — fewer than the largest pair the parameters' peak counts
    auto params_at = [&](size_t j) {
      if (l.zero < 3) return m.params;
      return elements * e / dp + (z3.tied + z3.own[j] + (j > 0 ? z3.own[j - 1] : 0)) * e;
    };
    auto moment = [&](double act, double grads, double params) {
      m.activations = std::max(m.activations, act);
      m.peak = std::max(m.peak, fixed - m.params + params + act + grads);
    };
    // the gradients during the forward: the DP buckets (dp > 1, from the step's start), ZeRO-2's
    // own run, ZeRO-3's shards; all of them once an earlier micro-batch's backward made them
    const double all = elements * e;
    const double g_forward = l.zero >= 3   ? (l.dp > 1 ? z3_shards : 0)
                             : l.zero == 2 ? z2_own + (accumulated ? all - z2_own : 0)
                                           : (l.dp > 1 || accumulated ? all : 0);
    // the gradients while layer j's backward runs (`made`: once it made its own), in the first
    // micro-batch's backward or (`later`) a later one's, when every gradient exists
    auto g_backward = [&](size_t j, bool made, bool later) {
      if (l.zero >= 3)
        return z3_shards + z3.tied * e + (j + 1 < L ? z3_in_flight(z3.own[j + 1]) : 0) + (made ? z3.own[j] * e : 0);
      // made by this micro-batch's backward so far (a tied weight's at its later layer)
      double so_far = made ? elems[j] * e : 0;
      for (size_t i = j + 1; i < L; ++i) so_far += elems[i] * e;
      if (j + 1 < L && !(j == 0 && made)) so_far += tied_elems * e;
      if (l.zero == 2)
        return later || accumulated ? z2_backward
               : l.grad_accum > 1   ? std::min(all, z2_own + so_far)
                                    : z2_own + (made || !z2_cast ? std::min(so_far, z2_backward - z2_own) : 0);
      return l.dp > 1 || later || accumulated ? all : so_far;
    };
    // the start of block j's backward: its first weight gradient made beside its temporary (a
    // .grad of its own where the gradients are not all there already)
    auto g_start = [&](size_t j, bool later) {
      const bool there = l.zero < 2 && (l.dp > 1 || later || accumulated);
      return g_backward(j, false, later) + (there ? 0 : a.block_start_weight * e);
    };
    const double out_saved = s + 1 < l.pp ? C * e : 0;  // the stage's output, until its backward is over
    // the end of the forward (the loss and its gradient on the last stage)
    moment(tokens * (n * saved_all + (holds_loss ? a.loss_transient : 0)), g_forward,
           l.zero >= 3 ? elements * e / dp + (z3.tied + z3.own[L - 1]) * e : m.params);  // ZeRO-3: the last layer's unit
    // the backward, at its largest occupancy (the micro-batches' worth of the stage held, the
    // one in backward included) in the first micro-batch's backward, and with grad-accum > 1 in
    // the next one's, every gradient made (one micro-batch fewer held unless the forward's peak
    // came after a backward already)
    struct Pass {
      double held;
      bool later;
    };
    std::vector<Pass> passes{{n, false}};
    if (l.grad_accum > 1) passes.push_back({accumulated ? n : std::max(n - chunk_share, chunk_share), true});
    for (const Pass& p : passes) {
      const double others = (p.held - chunk_share) * saved_all;
      // the head's backward: the logits gone, their gradient, its input's and (once) the head
      // weight's gradient before it is copied into .grad — the larger moment when C is large
      // against the micro-batch's tokens (the unfused head; the chunked head's is below)
      if (holds_loss && decoder && a.head.grad == 0)
        moment(tokens * (p.held * saved_all - a.logits + a.head_backward) + a.head_weight_grad,
               l.zero >= 3 ? z3_shards + (z3.tied + z3.own[L - 1]) * e + (p.later ? z3_in_flight(z3.own[0]) : 0)
                           : std::max(g_forward, g_backward(L - 1, true, p.later)),
               params_at(L - 1));
      // the chunked head's backward: wte's gradient made beside the one the loss hands out
      if (holds_loss && a.head.grad > 0)
        moment(tokens * (p.held * saved_all + a.head.backward),
               std::max(g_forward, p.later ? g_backward(L - 1, true, true) : a.head.grad), params_at(L - 1));
      // each block's backward, from its start (the loss's saved tensors of that micro-batch gone
      // on the last stage, the stage's later layers' saved tensors gone) to its end: its first
      // GEMM's weight gradient made (the block's last; a temporary beside the .grad it is copied
      // into), the block's own saved tensors gone but its input's edge and the gradient flowing
      double before = 0;  // saved bytes per token of the layers before j in this micro-batch
      for (size_t j = 0; j < L; ++j) {
        if (blocks[j]) {
          if (!replayed[j])
            moment(tokens * (others + out_saved + before + saved[j] + a.block_backward) + a.block_start_weight * a.weight_temp,
                   g_start(j, p.later), params_at(j));
          moment(tokens * (others + out_saved + before + a.block_end) + a.block_end_weight * a.weight_temp,
                 g_backward(j, true, p.later), params_at(j));
        }
        before += saved[j];
      }
      // recompute: each block's replay in backward, its inputs up to it held, the gradients of
      // the layers after it made
      double inputs = 0;
      for (size_t i = 0; i < L; ++i)
        if (replayed[i]) inputs += a.block_recompute;
      for (size_t i = L; i-- > 0;) {  // backward order: the last layer first
        if (!replayed[i]) continue;
        moment(tokens * (others + inputs + a.replay) + a.block_start_weight * a.weight_temp, g_start(i, p.later), params_at(i));
        inputs -= a.block_recompute;
      }
    }
    // the end of the backward: every gradient made, and the embedding's gradient of the tied wte
    // before it is added to the head's — the peak when the activations are small against the
    // weights (few tokens per micro-batch); ZeRO-3's gradient term already holds wte's
    if (decoder && holds_embedding && l.zero < 3) {
      m.activations = std::max(m.activations, a.embedding_grad);  // made in the backward's scope
      m.peak = std::max(m.peak, fixed + m.grads + a.embedding_grad);
    }
    plan.stages.push_back(m);
  }
  return plan;
}

void register_memory_cap(const TrainConfig& cfg, const nlohmann::json& entry, int64_t seq_len, int64_t dp, int rank) {
  if (cfg.max_memory_gib <= 0) {
    set_memory_cap(0, "");
    return;
  }
  const PlanLayout l = plan_layout(cfg, dp);
  set_memory_cap(static_cast<size_t>(cfg.max_memory_gib * 1024 * 1024 * 1024),
                 memory_plan_line(plan_memory(entry, seq_len, l), l, rank));
}

int stage_of_rank(const PlanLayout& l, int rank) { return static_cast<int>(rank / (l.dp * l.tp)); }

std::string memory_plan_table(const MemoryPlan& plan, const PlanLayout& l) {
  auto mib = [](double b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", b / (1 << 20));
    return std::string(buf);
  };
  std::ostringstream o;
  char row[200];
  const bool per_rank = l.world() <= 16;
  std::snprintf(row, sizeof row, "%-7s %5s %9s %10s %10s %10s %10s %8s %10s\n", per_rank ? "rank" : "ranks", "stage",
                "in-flight", "params", "grads", "optim", "act peak", "comm", "peak");
  o << "planned memory per rank (MiB):\n" << row;
  for (int r = 0; r < (per_rank ? l.world() : l.pp); ++r) {
    const int s = per_rank ? stage_of_rank(l, r) : r;
    const StageMemory& m = plan.stages[static_cast<size_t>(s)];
    std::string who = std::to_string(r);
    if (!per_rank) who = std::to_string(s * l.dp * l.tp) + "-" + std::to_string((s + 1) * l.dp * l.tp - 1);
    std::snprintf(row, sizeof row, "%-7s %5d %9lld %10s %10s %10s %10s %8s %10s\n", who.c_str(), s,
                  static_cast<long long>(m.in_flight), mib(m.params).c_str(), mib(m.grads).c_str(),
                  mib(m.optim).c_str(), mib(m.activations).c_str(), mib(m.comm).c_str(), mib(m.peak).c_str());
    o << row;
  }
  if (!plan.notes.empty()) o << "note: " << plan.notes << "\n";
  return o.str();
}

std::string memory_plan_line(const MemoryPlan& plan, const PlanLayout& l, int rank) {
  const StageMemory& m = plan.stages[static_cast<size_t>(stage_of_rank(l, rank))];
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "the plan for this layout (dp %lld tp %lld pp %lld zero %d): %.1f MiB at peak on this rank "
                "(params %.1f, grads %.1f, optim %.1f, activations %.1f, comm %.1f MiB)",
                static_cast<long long>(l.dp), static_cast<long long>(l.tp), static_cast<long long>(l.pp), l.zero,
                m.peak / (1 << 20), m.params / (1 << 20), m.grads / (1 << 20), m.optim / (1 << 20),
                m.activations / (1 << 20), m.comm / (1 << 20));
  return buf;
}

}  // namespace st::runtime
