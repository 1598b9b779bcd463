// What the layout tests share (tests/runtime/train/test_layouts_*.cpp, one binary: test_layouts).
//
// The property that matters most: every layout (dp, tp, pp, schedule, grad-accum, micro-batch,
// ZeRO, recompute, dropout) gives the same loss curve as one process on the same global batch.
// Under mpirun -np N the tests run `shardtrain train`'s code path (run_parallel_training) in
// several layouts of N ranks and compare each step's loss and global grad norm with a
// single-process Trainer on every rank. The files, one concept each:
//   test_layouts_data_parallel.cpp   dp, ZeRO-1/2, bf16 gradient communication, fp8 (dp, ZeRO-1/3, recompute, tp)
//   test_layouts_zero3.cpp           ZeRO-3 alone and composed (tp, pp, interleaved, fp16, bf16)
//   test_layouts_pipeline.cpp        GPipe, 1F1B, interleaved, recompute, dp × pp
//   test_layouts_model_parallel.cpp  tp, the Hugging Face fixture, every axis at once (np 8)
//   test_layouts_numerics.cpp        dropout masks and an fp16 overflow alike in every layout
//   test_layouts_resume.cpp          checkpoints written by one layout resumed by another
// The strict-p2p twins (test_layouts_np<n>_strict) leave out the tests with no pipeline layout at
// n (tests/runtime/train/CMakeLists.txt lists them): a test that gains one leaves that list.
//
// Tolerance: measured, not guessed (see "The noise of a run" below). A layout computes the
// one-process function in another summation order (sums over ranks, stages and tp shards, other
// GEMM shapes), and training amplifies the roundoff of that order step after step, so a fixed
// tolerance passes or fails by luck of the model, the data and the CPU (a user's machine once
// failed 1e-5 by 6e-5). Each comparison therefore measures its own noise floor: the one-process
// run re-cut into other micro-batches (every sum over sequences reordered) and with its matrix
// products blocked differently (every sum over features reordered).
//
// ---- The noise of a run -----------------------------------------------------------------------
// Two one-process runs compute the reference's function with its sums in other orders:
//   resplit   the same global batch cut differently (one micro-batch of B·K·dp sequences instead
//             of K·dp of B, or B of one when K·dp = 1): every sum over sequences — the GEMMs'
//             token reductions, the weight gradients, the accumulation over micro-batches — in
//             another order (what data parallelism and pipelines change);
//   kc 8      every CPU matrix product summed in blocks of 8 instead of 256 along its depth
//             (ops::cpu::sgemm_set_depth_block): every sum over features in another order (what a
//             tensor-parallel row split does to c_proj and the vocabulary-parallel loss).
// Their distance to the reference, step by step, is the roundoff that this model, data and CPU
// amplify: noise_i = max over both runs and steps j ≤ i of |other_j − ref_j| / |ref_j| (an
// envelope: one step's distance may vanish by chance; the envelope never shrinks). A layout
// passes when its distance stays within kNoiseMultiple · max(noise_i, kNoiseFloor).
//   kNoiseMultiple: measured on this project's CPU (2026-12-03) over every comparison at np 2, 3,
//     4 and 8 (ST_LAYOUT_NOISE_LOG=1 prints each ratio), the largest layout/noise ratio was 1.7
//     (dropout under tp 3, recompute under tp 2); 8 leaves a margin of 4.7. The widest tolerance
//     this gives in f32 is 8e-5 relative (a resumed run's last step), while a real error is far
//     above it: a rank whose gradient is not divided by dp changes the gradient by 1/dp of itself
//     (≥ 25 %); a sequence of the global batch read twice or missed changes the step's loss by
//     about 1/G of its spread over sequences (≥ 1e-3 here). fp16 runs are compared the same way:
//     their noise is f16 rounding (~1e-3), so is their tolerance.
//   kNoiseFloor: 2⁻²¹ ≈ 4.8e-7 relative — a few f32 roundings of the first step, where the
//     resplit may agree to the last bit and a layout still differs by the f32 rounding of its
//     loss all-reduce (runtime/parallel/reductions.h sends f32).
#pragma once
#include <string>
#include <vector>

#include "runtime/setup/train_config.h"
#include "runtime/train/train_step.h"

namespace st::layouts {

int world_rank();
int world_size();
void barrier();

// This test run's folder (one per ctest: the strict-p2p twin of a rank count may run beside it
// under ctest -j), holding tokens.bin: 20000 tokens of a learnable stream (mostly i mod 37).
std::string work_dir();

// A 4-block GPT (C 32, 4 heads, V 64, T 16), micro-batch 2 × grad-accum 2, 5 AdamW steps.
runtime::TrainConfig base_config();
// base_config's Llama: 4 query heads over 2 key/value heads (GQA), rotary positions, SwiGLU, an
// untied head.
runtime::TrainConfig llama_config();

struct Curve {
  std::vector<double> loss, grad_norm, loss_scale;
  std::vector<bool> skipped;
  // --precision fp8: the steps' FP8 overflow / underflow counts (every rank's; empty otherwise)
  std::vector<double> fp8_overflow, fp8_underflow;
  // reference curves only: the noise envelope per step (relative; see reference())
  std::vector<double> loss_noise, norm_noise;
};

constexpr double kNoiseMultiple = 8.0;
constexpr double kNoiseFloor = 4.76837158203125e-7;

double rel(double a, double b);

// One process, global batch G = B·K·dp as K·dp micro-batches of B (the same sequences in order).
Curve one_process(runtime::TrainConfig c, const runtime::TrainSeams& seams = {});
// The reference of a layout with dp replicas: one process on the same global batch, with its
// noise envelope.
Curve reference(runtime::TrainConfig c, int64_t dp, const runtime::TrainSeams& seams = {});
// The reference of the layout `c` itself: its dp read from c (dp 0: world / (tp·cp·pp)), tp and
// cp set to 1 (neither changes the global batch B·K·dp; pp is one_process's to drop).
Curve reference_of(runtime::TrainConfig c);
// The curve's first n steps (a run stopped at a checkpoint against the uninterrupted reference).
Curve first_steps(Curve c, size_t n);
// mem_act_peak of the last step run `name` wrote (rank 0's metrics).
int64_t last_act_peak(const std::string& name);
// The layout `c` (validation at its last step, c.val_data set) against one process run by rank 0
// (cp, pp 1): the val losses within the training loss's noise envelope at that step (the same
// weights up to that step's noise, one more forward). `name` names the layout run's files.
void expect_val_loss_like_one_process(runtime::TrainConfig c, const std::string& name, const std::string& what);
// The layout `c` under run_parallel_training on every rank; its metrics read back.
Curve run_layout(runtime::TrainConfig c, const std::string& name, const runtime::TrainSeams& seams = {});
// got (steps from+1 …) against the reference `want` within its noise (see above). `extra`: an
// absolute relative allowance added per step (the HF fixture: our own distance to transformers).
void expect_same(const Curve& got, const Curve& want, const std::string& what, size_t from = 0,
                 const Curve* extra = nullptr);
// The layout `c` (in f32) trained in bf16 against one process in bf16: within that curve's noise
// plus, per step, its own distance to f32 (a layout rounds to bf16 at other places than one
// process — the ring at other block boundaries — an error of the size of bf16's own), and within
// 2 % of the f32 curve (the bound of the dp, pp and Llama bf16 tests). `name` names the run's files.
void expect_bf16_like_one_process(runtime::TrainConfig c, const std::string& name, const std::string& what);

}  // namespace st::layouts
