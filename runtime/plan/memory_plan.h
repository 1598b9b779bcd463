// The memory planner: what each rank of a layout will hold at its peak, in closed form from the
// model's description (every layer's full shapes, runtime/setup/model_registry.h) and the layout
// (dp, tp, pp, ZeRO stage, schedule, micro-batch, grad-accum, recompute, precision) — before
// anything is built. `shardtrain plan` prints it, `--max-memory`'s error quotes it, and
// tests/runtime/plan/test_memory_plan.cpp holds it to the allocator's measured peaks (within 5 %
// for the layouts of its table and for a seeded random sweep of layouts and sizes; docs/memory.md
// has the tables and where it is weaker).
//
// Per rank of pipeline stage s (every dp × tp rank of a stage holds the same, up to ZeRO's
// split by whole tensors), with P_s its parameters (its layers' tensors, each its tp shard by the
// family's shard rule), e the compute dtype's bytes (fp32 4, fp16/bf16 2):
//   parameters   P_s · e
//   gradients    P_s · e                              ZeRO-2: its own run (below); ZeRO-3: / dp
//   optimizer    P_s · (master + state)               ZeRO-1/2/3: / dp
//                  master 4 under fp16/bf16 (f32 copy), 0 under fp32; state AdamW 8, SGD 4,
//                  + 12 where the run keeps the optimizer's snapshot block (keeps_snapshot_block:
//                  --async-checkpoint 1 with AdamW on CUDA)
//   ZeRO-2       gradients: the largest owner's run of buckets (Zero1's cut: contiguous runs of
//                whole tensors balanced by bytes), plus in backward the other owners' gradients
//                the engine holds until their bucket is final, at most the window's buckets and
//                the launching one (kShardWindow + 1 of the largest bucket; 2 where cast buffers
//                carry them) and the tied wte's gradient; with grad-accum > 1 all of them
//   ZeRO-3       parameters / dp too, plus the gathered units in e: the tied weight (a unit of
//                its own, gathered from the head's backward to the embedding's) and the largest
//                two consecutive layers (the running one and the prefetched one); gradients / dp
//                plus the transient of a unit's reduce-scatter: the tied weight's and the largest
//                unit's full gradients in e, its comm buffer and received shard in the comm dtype
//                (runtime/parallel/zero3.h); no DP cast buffers. At a moment of layer j's backward
//                the gathered units are j's, the one before it and the tied weight, and the
//                gradients the shards, the tied weight's, j's own and the unit after it still in
//                flight (its comm buffer and received shard)
//   activations  the schedule's in-flight micro-batches n_s (GPipe m, 1F1B min(m, pp − s),
//                interleaved its bound; one process or no pipeline: 1) × the stage's saved bytes
//                per micro-batch, plus the last stage's loss transient. Per token of a
//                micro-batch (B·T tokens), from the tensors the decoder's ops keep for backward on the
//                run's device (--device: every tensor an autograd node holds stays until its
//                backward), in the sizes (A = C/tp, F = 4C/tp the attention and MLP widths a tp
//                rank holds, H/tp its heads; a model's own head size D and width F where it
//                has them):
//                  block       (r·C + a·A + f·F)·e + (s + H/tp)·4  (block_activations below:
//                              r, a, f count the (B, T, ·) tensors kept; the f32 part is the two
//                              norms' statistics, s = 4 for LayerNorm (mean, rstd), 2 for RMSNorm
//                              (rstd), and the attention's log-sum-exp — no attention path keeps
//                              a T×T tensor). The GPT-2 block (learned positions, as many
//                              key/value heads as heads, GELU with biases):
//                              CPU, and CUDA in fp32:   r 8 (tp > 1: 10), a 14, f 3
//                              CUDA in fp16/bf16:       r 6 (tp > 1: 10), a 4 at tp 1 with head
//                              size 64 (packed flash / cuDNN attention), else 11, f 2 — the bias
//                              and GELU epilogues fuse the GEMMs' outputs (ops/matmul.cpp, ops/mlp.cpp)
//                              The grouped-query block (rotary or Hkv < H, no biases: Llama), with
//                              A_kv = Hkv·D/tp: r 6 (tp > 1: 8), the packed q/k/v and the
//                              attention's output (2A + 2A_kv), f 3 with SwiGLU (gate|up, their
//                              product), and per micro-batch the two concatenated weights the
//                              GEMMs keep, ((A + 2A_kv)·C + 2F·C)·e (spread over its B·T tokens)
//                              fp8 (--precision fp8, e 2): + (2C + A + F) bytes (each GEMM
//                              input's E4M3 copy) + the E4M3 weights per micro-batch over its B·T
//                              tokens (12·C²/tp for GPT-2; any block: its four GEMMs' weights);
//                              GPT-2 on the CPU a 3 fewer, f 1 fewer, r 2 fewer at tp 1 (the FP8
//                              linear adds its bias outside autograd)
//                              recompute: C·e (its input)
//                              sequence parallel (--sequence-parallel 1, tp > 1): r = 8/tp
//                              (GPT-2) or 6/tp (grouped-query): every (B, T, C) tensor on T/tp
//                              positions, the column-parallel GEMMs re-gathering their inputs in
//                              the backward (fp8: 4 + 8/tp, 4 + 6/tp, the gathered inputs and
//                              partial sums kept); GPT-2 unfused a 3 fewer, f 1 fewer (the bias
//                              inside the GEMM's node); the norms' statistics / tp
//                              (block_activations below); recompute's input, a stage's output and
//                              its p2p buffer C·e/tp; the head's terms unchanged (measured:
//                              test_memory_plan's "sp" rows and SequenceParallelKeepsOneTpthOfTheRegion)
//                  embedding   C·e
//                  loss        saved per micro-batch: V/tp·l + (C + 2)·4 (the logits, ln_f's
//                              output and statistics); once, at the end of the forward: V/tp·l
//                              + (C + 5)·4, + 2·C·4 under tp (the logits' gradient, the loss's
//                              buffers); l = e, on the CPU in fp16/bf16 e + 4 (its cross-entropy
//                              works on an f32 copy)
//                  the head's backward (the last stage's other moment): the logits gone, their
//                              gradient and its input's, (V/tp + C)·e per token, and the tied
//                              weight's gradient once, V/tp·C·e: the larger when C ≳ B·T
//                  chunked loss (--chunked-head where head_is_chunked: ops/lm_head_loss.h) saved per
//                              micro-batch: (C + 2)·4 + 2·C·e + V·C·4 / (B·T) (dh and dw in f32,
//                              ln_f's saved input and statistics, its output held by the loss's
//                              node); once, in the forward: rows·V·4 / (B·T) + 4·4, + in fp16/bf16
//                              (V + rows)·C·4 / (B·T) (one chunk of f32 logits, the token batch,
//                              the widened wte and chunk of h), rows = min(B·T,
//                              ops::lm_head_chunk_rows(V, e)) — no term in V per token; its
//                              backward (a peak of its own, below): the token batch, dh and dw
//                              cast to e in place of their f32 buffers, and wte's gradient V·C·e
//                  a stage before the last: its output, C·e per micro-batch (its backward)
//                  block backward, at its start: the block's saved tensors and 8·C bytes a token
//                              in fp32, 46·C in fp16/bf16 (measured on the CPU, whose kernels stage
//                              bf16 operands in f32; the same on CUDA, not measured there), and its
//                              first weight gradient (the MLP's down projection, F/tp·C) as a
//                              temporary (e; CPU fp16/bf16 also its f32 product) beside its .grad;
//                              at its end: the layers before it, 9·C·4 + 8 a token (its input, the
//                              first norm's output, the gradients around its first GEMM) and that
//                              GEMM's weight gradient ((A + 2·A_kv)·C) likewise
//                recompute: at each block's replay in backward, the inputs of the blocks up to
//                it, the replayed block and its backward's transient (block + 5·C·4 per token)
//   comm         DP/ZeRO gradient buckets are the gradients themselves (no copy); a
//                --grad-comm-dtype other than the gradients' adds min(2, buckets) cast buffers
//                of the largest bucket (GradReducer's cut: reverse registration order, the first
//                ≤ 1 MiB, the others --bucket-mb, under ZeRO-1/2 never two owners' tensors);
//                a pipeline stage before the last adds its p2p buffer: the received gradient
//                of its output, (B, T, C) in e (a stage's received input is its first block's
//                saved input, counted there)
//   peak         the largest over the step's moments of parameters + optimizer + comm + that
//                moment's activations and gradients: the end of the forward (gradients: dp > 1
//                the buckets from the step's start, ZeRO-2 its own run, ZeRO-3 the shards; all of
//                them once an earlier micro-batch's backward ran first — grad-accum > 1 without a
//                pipeline, or 1F1B with more micro-batches than in flight; GPipe none); the head's
//                backward (unfused or chunked); each block's backward start and end and, with
//                recompute, each replay — in the first micro-batch's backward (the gradients of
//                the layers after it, the tied wte's from the head's backward on) and, with
//                grad-accum > 1, a later one's (every gradient, one micro-batch fewer held unless
//                the forward's peak already had them); the end of the backward on the embedding's
//                stage (every gradient and the embedding's wte gradient before it is added)
// The CPU coefficients are held to the allocator by tests/runtime/plan/test_memory_plan.cpp; the
// CUDA ones are derived from the ops' code (tests/runtime/plan/test_memory_plan_device.cpp holds
// the closed form) and checked on the GPU by launch/gpu/run_memory_gpu.sh. Models without a
// decoder description get parameters, gradients and optimizer only (activations 0, in `notes`).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/nn/language_model.h"
#include "runtime/setup/train_config.h"

namespace st::runtime {

struct PlanLayout {
  int64_t dp = 1, tp = 1, pp = 1;
  // context parallelism (--cp): each of the cp ranks of a sequence holds T/cp of its positions
  // (two chunks, one from each end) — every per-token term below counts B·T/cp tokens; the
  // weights, gradients and optimizer state are replicated over cp as over dp
  int64_t cp = 1;
  int zero = 0;  // ZeRO stage 0..3 (0: plain data parallel)
  Schedule schedule = Schedule::one_f_one_b;
  int64_t virtual_stages = 1;
  int64_t micro_batch = 1, grad_accum = 1;
  bool recompute = false;
  Precision precision = Precision::fp32;
  Precision grad_comm_dtype = Precision::fp32;
  OptimizerKind optimizer = OptimizerKind::adamw;
  PartitionKind partition = PartitionKind::params;
  double bucket_mb = 25.0;
  Device device = Device::cpu;  // the activation term's ops (the CUDA paths fuse and keep less)
  bool chunked_head = false;  // --chunked-head (in effect only where head_is_chunked says so)
  bool sequence_parallel = false;  // --sequence-parallel 1 at tp > 1 (block_activations says what it changes)
  bool snapshot_block = false;     // keeps_snapshot_block: the optimizer term + 12 bytes a parameter
  int64_t world() const { return dp * cp * tp * pp; }
  PrecisionPolicy policy() const { return precision_policy(precision, grad_comm_dtype); }
};
// The layout a train config asks for (its ZeRO stage: cfg.zero as an integer).
PlanLayout plan_layout(const TrainConfig& cfg, int64_t dp);
// The tokens of a micro-batch one rank holds: B·T, over cp under context parallelism.
double local_tokens(const PlanLayout& layout, int64_t seq_len);
// Whether the loss runs the chunked head in this layout: --chunked-head, no tensor
// parallelism (the vocabulary-parallel loss keeps the unfused head) and no ZeRO-3 (Trainer::init).
bool head_is_chunked(const PlanLayout& layout);

// A decoder block's saved tensors per token on `device` (the header's block line), from the
// model's description (DecoderShape: heads, key/value heads, head size, MLP width and kind, norm,
// rope): how many (B, T, C), (B, T, A) and (B, T, F) tensors it keeps for backward, and their
// bytes with the f32 statistics. `tokens` (B·T of a micro-batch) spreads what a block keeps per
// micro-batch rather than per token (the grouped-query block's concatenated weights) over them.
struct BlockActivations {
  double replicated = 0, attention = 0, mlp = 0;  // counts of (B,T,C), (B,T,A), (B,T,F) tensors
  bool packed_attention = false;                  // the kernels read q, k, v inside the packed projection
  double bytes_per_token = 0;
};
// sequence_parallel (tp > 1): the norms' outputs and statistics, the residual sums, the
// row-parallel outputs after their reduce-scatter (and bias adds) and the block's output are
// (B, T/tp, C): each 1/tp of a token's C. Nothing of the block stays (B, T, C): a column-parallel
// GEMM keeps its input's T-shard and gathers it again in its backward, a row-parallel one keeps no
// partial sums (both one node with their collective, runtime/parallel/sp_linear.h; the separate
// gather and reduce-scatter nodes kept the gathered input and the partial sums whole, r = 4 + 8/tp
// and 4 + 6/tp, as they still do under fp8): GPT-2 block r = 8/tp (tp: 10), grouped-query r = 6/tp
// (tp: 8); and as the column node adds its bias inside, the GPT-2 block's unfused c_attn and c_fc
// keep no pre-bias product (a − 3, f − 1 on the CPU and in CUDA fp32, as CUDA's fused epilogues).
BlockActivations block_activations(const DecoderShape& shape, int64_t tp, Precision precision, Device device,
                                   double tokens = 0, bool sequence_parallel = false);

// What one rank of stage `stage` holds, in bytes.
struct StageMemory {
  int stage = 0;
  int64_t in_flight = 1;  // micro-batches whose activations it holds at once
  double params = 0, grads = 0, optim = 0, activations = 0, comm = 0, peak = 0;
  // comm's parts: the DP/ZeRO cast buffers (the allocator counts them as gradients) and the
  // pipeline's p2p buffers (counted as activations: they live inside the step's forward/backward)
  double comm_dp = 0, comm_p2p = 0;
};

struct MemoryPlan {
  std::vector<StageMemory> stages;  // one per pipeline stage
  double max_peak() const;
  std::string notes;                // what the model does not cover, if anything
};

// `entry`: the model entry ({"family", "config"}) the run builds; seq_len the tokens per sequence.
MemoryPlan plan_memory(const nlohmann::json& entry, int64_t seq_len, const PlanLayout& layout);

// With cfg.max_memory_gib > 0: sets the allocator's cap (tensor/memory_category.h) with this
// rank's plan as the note its error carries; else clears it.
void register_memory_cap(const TrainConfig& cfg, const nlohmann::json& entry, int64_t seq_len, int64_t dp, int rank);

// The stage of world rank `rank` (rank = ((pp_idx · dp) + dp_idx) · tp + tp_idx).
int stage_of_rank(const PlanLayout& layout, int rank);
// "rank  stage  params  grads  optim  act  comm  peak" rows in MiB, one per rank (world ≤ 16)
// or one per stage.
std::string memory_plan_table(const MemoryPlan& plan, const PlanLayout& layout);
// One line for --max-memory's error: "the plan for dp 1 tp 1 pp 1 zero 0: 45.2 MiB per rank at peak".
std::string memory_plan_line(const MemoryPlan& plan, const PlanLayout& layout, int rank);

}  // namespace st::runtime
