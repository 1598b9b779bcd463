// The one-process training step against bits recorded from the trainer as it stood at 52a470f
// (before the step was written once for eager and graph runs: runtime/train/train_step.h). Any
// change to the step's arithmetic — the loss factor, the loss sum, the gradient statistics, the
// skip decision, the loss-scale update, clipping, AdamW's or SGD's scalars, dropout seeds —
// changes a recorded bit and fails here, so a restructuring that claims "the same numbers" is
// held to it. CPU numerics are the same on every x86-64 CPU (docs/testing.md, "CPU numerics"), so
// the recorded values hold on any CI machine.
//
// No tolerance: per step the loss and the gradient norm are compared as 64-bit patterns, and the
// f32 master weights after the last step through checksum64 of their bytes.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/common/checksum.h"
#include "runtime/data/token_data.h"
#include "runtime/train/trainer.h"
#include "tensor/philox.h"

using namespace st;
using namespace st::runtime;
namespace fs = std::filesystem;

namespace {

std::string tokens() {
  static std::string path = [] {
    std::string d = std::string(ST_TEST_BINARY_DIR) + "/step_golden";
    fs::remove_all(d);
    fs::create_directories(d);
    std::vector<uint16_t> t(6000);
    for (size_t i = 0; i < t.size(); ++i)
      t[i] = static_cast<uint16_t>(philox_uniform(11, i) < 0.7f ? (i * 7) % 31 : (philox4x32_10(12, i).x[0] % 64));
    write_token_file(d + "/tokens.bin", t);
    return d + "/tokens.bin";
  }();
  return path;
}

TrainConfig base(const std::string& model, Precision p, int64_t K, double dropout) {
  TrainConfig c;
  c.model = model;
  c.layers = 2;
  c.d_model = 32;
  c.heads = 4;
  c.vocab = 64;
  c.seq_len = 16;
  c.micro_batch = 2;
  c.grad_accum = K;
  c.steps = 5;
  c.lr = 3e-3;
  c.weight_decay = 0.1;
  c.clip = 0.5;  // below the first steps' norms: the clip coefficient is used
  c.dropout = dropout;
  c.precision = p;
  c.data = tokens();
  c.progress = false;
  c.log_every = 1000;
  c.cuda_graph = false;
  return c;
}

uint64_t bits(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

struct Golden {
  std::vector<uint64_t> loss, norm;  // per step
  uint64_t masters = 0;              // checksum64 of every f32 master's bytes, in order
};

Golden run(const TrainConfig& c, double initial_scale) {
  Trainer t(c);
  if (initial_scale > 0) t.scaler().set_state(initial_scale, 0);
  Golden g;
  for (int64_t s = 0; s < c.steps; ++s) {
    const StepMetrics m = t.train_step();
    g.loss.push_back(bits(m.loss));
    g.norm.push_back(bits(m.grad_norm));
  }
  std::vector<uint64_t> sums;
  for (const auto& [name, w] : t.optimizer().master_weights()) {
    const Tensor cw = w.contiguous();
    sums.push_back(checksum64(cw.data_ptr(), static_cast<size_t>(cw.nbytes())));
  }
  g.masters = checksum64(sums.data(), sums.size() * sizeof(uint64_t));
  return g;
}

// Prints the run as a Golden initialiser (how the values below were recorded) and compares.
void expect_golden(const TrainConfig& c, const Golden& want, double initial_scale = 0) {
  const Golden got = run(c, initial_scale);
  std::string rec = "{{";
  for (uint64_t b : got.loss) rec += "0x" + checksum_hex(b) + "ull, ";
  rec += "}, {";
  for (uint64_t b : got.norm) rec += "0x" + checksum_hex(b) + "ull, ";
  rec += "}, 0x" + checksum_hex(got.masters) + "ull}";
  ASSERT_EQ(got.loss.size(), want.loss.size()) << "recorded: " << rec;
  for (size_t s = 0; s < got.loss.size(); ++s) {
    EXPECT_EQ(got.loss[s], want.loss[s]) << "step " << s + 1 << " loss; this run: " << rec;
    EXPECT_EQ(got.norm[s], want.norm[s]) << "step " << s + 1 << " grad norm; this run: " << rec;
  }
  EXPECT_EQ(got.masters, want.masters) << "master weights after the run; this run: " << rec;
}

}  // namespace

// AdamW, f32, two micro-batches a step, dropout 0.1, weight decay, clipping
TEST(StepGolden, GptFp32AdamWAccumulationDropout) {
  expect_golden(base("gpt", Precision::fp32, 2, 0.1), {{0x401092a200000000ull, 0x401096f7b0000000ull, 0x40107048b0000000ull, 0x40103da080000000ull, 0x40100bdc90000000ull}, {0x3ff7ff51c8dee440ull, 0x3ff7181b4938fe1dull, 0x3ff088dddd4e345full, 0x3febf4c2662e0bd6ull, 0x3ff1863b7812f64bull}, 0x1ba05266812334e6ull});
}

// bf16 compute with f32 masters
TEST(StepGolden, GptBf16AdamW) { expect_golden(base("gpt", Precision::bf16, 1, 0.0), {{0x40109a95a0000000ull, 0x401061ca80000000ull, 0x40106f0c80000000ull, 0x4010518260000000ull, 0x40105d29a0000000ull}, {0x3fff36eee9a1c3c0ull, 0x3ffa5ef55693e247ull, 0x3ffab64ce17bf7eeull, 0x3ff53a57067d0e57ull, 0x3ff701c2a563e690ull}, 0xf5ab56c0fc32a153ull}); }

// fp16 with dynamic loss scaling from 2^16
TEST(StepGolden, GptFp16AdamWScaling) { expect_golden(base("gpt", Precision::fp16, 1, 0.0), {{0x40109a8600000000ull, 0x401061be20000000ull, 0x40106f3620000000ull, 0x4010517600000000ull, 0x40105d3c20000000ull}, {0x3fff34c94a00d76aull, 0x3ffa6f59e2a5113aull, 0x3ffaa3cf163aea45ull, 0x3ff5351562bbfe47ull, 0x3ff700a6a1d4a642ull}, 0xf5ac42c5f2e18833ull}); }

// fp16 from a scale of 2^24, two micro-batches: the first steps overflow and are skipped (the
// scale halves each time, the grad norm is NaN), then the run trains
TEST(StepGolden, GptFp16OverflowsSkipped) {
  TrainConfig c = base("gpt", Precision::fp16, 2, 0.0);
  c.steps = 9;
  expect_golden(c, {{0x40109284b0000000ull, 0x4010c0eca0000000ull, 0x401084f9d0000000ull, 0x40108e5040000000ull, 0x4010a49790000000ull, 0x40108d7850000000ull, 0x401098f2f0000000ull, 0x40108ed9c0000000ull, 0x40104fde80000000ull}, {0x7ff8000000000000ull, 0x7ff8000000000000ull, 0x7ff8000000000000ull, 0x7ff8000000000000ull, 0x7ff8000000000000ull, 0x7ff8000000000000ull, 0x3ff88dcfb2d63236ull, 0x3ff2bd7c726aba9full, 0x3ff3df1daa416866ull}, 0xafcc74eb79833b5full}, std::ldexp(1.0, 24));
}

// SGD with momentum (a host-scalar optimizer), two micro-batches
TEST(StepGolden, GptFp32SgdMomentum) {
  TrainConfig c = base("gpt", Precision::fp32, 2, 0.0);
  c.optimizer = OptimizerKind::sgd;
  c.lr = 0.05;
  expect_golden(c, {{0x4010928410000000ull, 0x4010b37b10000000ull, 0x40107afda0000000ull, 0x4010669a10000000ull, 0x4010593320000000ull}, {0x3ff862e1d9ba0055ull, 0x3ff936960f698086ull, 0x3ff3582fd9b379c2ull, 0x3ff086eaa90a225dull, 0x3ff01fedd939c468ull}, 0x8956f6fb872f3889ull});
}

// the seed's encoder Transformer (its own dropout 0.1), recompute on
TEST(StepGolden, SimpleTransformerRecompute) {
  TrainConfig c = base("simple-transformer", Precision::fp32, 1, -1);
  c.recompute = true;
  expect_golden(c, {{0x40109e22a0000000ull, 0x40106101e0000000ull, 0x401020fa20000000ull, 0x401020d0e0000000ull, 0x401027e780000000ull}, {0x3ffbeaa76cdf0a4bull, 0x3ffbd93be86644faull, 0x3ff700f814195b7dull, 0x3ff52127d67b5d47ull, 0x3ff5b72a6ef11af2ull}, 0x4f15d687cd9be5d3ull});
}
