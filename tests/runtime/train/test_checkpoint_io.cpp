// Checkpoints and initial weights in parts, under mpirun -np 4.
// Loading: a rank reads only the tensors it holds, and of a tensor-parallel shard only its
// slices (positioned reads; of our own checkpoints, whose chunks carry checksums, the chunks
// those touch), whether from one model.safetensors or from Hugging Face's sharded
// layout — the bytes each rank reads equal the closed form of its share of the HF fixture
// (2 layers, C 64, V 256, 32 positions), and the curves still equal the fixture's transformers
// run (reference.json) to the 1e-5 of test_layouts.
// Saving: every rank writes its share into HF's sharded layout (each tensor once, the index's
// total the model's bytes); a checkpoint written under pp 2 × tp 2 resumes under dp 4 and in
// one process on the uninterrupted one-process curve (1e-5, test_layouts' tolerance); a crash
// right before the rename leaves the previous checkpoint the newest, and the next run (another
// layout) ignores the crash's leftovers and those of the old file gather.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "models/hf_gpt2.h"
#include "runtime/data/token_data.h"
#include "runtime/io/checkpoint_dir.h"
#include "runtime/io/safetensors.h"
#include "runtime/io/safetensors_index.h"
#include "runtime/train/parallel_training.h"
#include "runtime/train/trainer.h"
#include "tensor/philox.h"
#include "tests/support/sharded_fixture.h"
#include "tests/support/mpi_world.h"

using namespace st;
using namespace st::runtime;
namespace fs = std::filesystem;

namespace {

using st::testing::barrier;
using st::testing::world_rank;
using st::testing::world_size;

const std::string kFixture = ST_FIXTURE_DIR;

std::string work_dir() {
  static std::string dir = [] {
    std::string d = std::string(ST_TEST_BINARY_DIR) + "/checkpoint_io_np" + std::to_string(world_size());
    if (world_rank() == 0) {
      fs::remove_all(d);
      fs::create_directories(d);
      st::testing::write_sharded_fixture(kFixture, d + "/hf_sharded", 3);
      std::vector<uint16_t> tokens(20000);  // test_layouts' learnable stream
      for (size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = static_cast<uint16_t>(philox_uniform(3, i) < 0.8f ? i % 37 : (philox4x32_10(4, i).x[0] % 62));
      write_token_file(d + "/tokens.bin", tokens);
    }
    barrier();
    return d;
  }();
  return dir;
}

// The fixture's transformers run (tests/fixtures/make_hf_gpt2_tiny.py): global batch 4 × 32.
TrainConfig fixture_config(const std::string& init_from) {
  TrainConfig c;
  c.model = "gpt";
  c.init_from = init_from;
  c.data = kFixture + "/tokens.bin";
  c.seq_len = 32;
  c.micro_batch = 1;
  c.grad_accum = 4;
  c.steps = 5;
  c.lr = 1e-3;
  c.beta1 = 0.9;
  c.beta2 = 0.95;
  c.eps = 1e-8;
  c.weight_decay = 0.1;
  c.clip = 1.0;
  c.partition = PartitionKind::uniform;
  c.progress = false;
  c.log_every = 1000;
  c.timeout_s = 120;
  return c;
}

struct Outcome {
  std::vector<double> loss, grad_norm;
  uint64_t bytes_read = 0;  // this rank's, during the run
};

Outcome run_layout(TrainConfig c, const std::string& name) {
  c.metrics = work_dir() + "/" + name + ".jsonl";
  if (world_rank() == 0) fs::remove(c.metrics);
  barrier();
  Outcome r;
  const uint64_t before = safetensors_bytes_read();
  EXPECT_EQ(run_parallel_training(c), 0);
  r.bytes_read = safetensors_bytes_read() - before;
  barrier();
  std::ifstream in(c.metrics);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    r.loss.push_back(j["loss"].get<double>());
    r.grad_norm.push_back(j["grad_norm"].get<double>());
  }
  barrier();
  return r;
}

void expect_reference_curve(const Outcome& got, const std::string& what) {
  auto ref = nlohmann::json::parse(std::ifstream(kFixture + "/reference.json"));
  ASSERT_EQ(got.loss.size(), ref["steps"].size()) << what;
  for (size_t i = 0; i < got.loss.size(); ++i) {
    const double l = ref["steps"][i]["loss"].get<double>(), g = ref["steps"][i]["grad_norm"].get<double>();
    EXPECT_NEAR(got.loss[i], l, 1e-5 * l) << what << " loss, step " << i + 1;
    EXPECT_NEAR(got.grad_norm[i], g, 1e-5 * g) << what << " grad norm, step " << i + 1;
  }
}

// test_layouts' base config: a 4-layer GPT (d 48, 12 heads, V 62, T 16), global batch B 2 × K 2.
TrainConfig grid_config() {
  TrainConfig c;
  c.model = "gpt";
  c.layers = 4;
  c.d_model = 48;
  c.heads = 12;
  c.vocab = 62;
  c.seq_len = 16;
  c.micro_batch = 2;
  c.grad_accum = 2;
  c.steps = 5;
  c.lr = 3e-3;
  c.weight_decay = 0.1;
  c.clip = 1.0;
  c.eps = 1e-4;  // test_layouts says why
  c.data = work_dir() + "/tokens.bin";
  c.progress = false;
  c.log_every = 1000;
  c.timeout_s = 120;
  return c;
}

// One process, steps 1 … cfg.steps (resuming when cfg.resume), nothing written.
Outcome one_process(TrainConfig c) {
  c.dp = c.tp = c.pp = 1;
  c.metrics.clear();
  Trainer t(c);
  Outcome r;
  while (t.step() < c.steps) {
    StepMetrics m = t.train_step();
    r.loss.push_back(m.loss);
    r.grad_norm.push_back(m.grad_norm);
  }
  return r;
}

// got (steps from + 1 …) against want (steps 1 …), to test_layouts' 1e-5 relative.
void expect_same(const Outcome& got, const Outcome& want, size_t from, const std::string& what) {
  ASSERT_EQ(got.loss.size(), want.loss.size() - from) << what;
  for (size_t i = 0; i < got.loss.size(); ++i) {
    EXPECT_NEAR(got.loss[i], want.loss[i + from], 1e-5 * want.loss[i + from]) << what << " loss, step " << i + from + 1;
    EXPECT_NEAR(got.grad_norm[i], want.grad_norm[i + from], 1e-5 * want.grad_norm[i + from])
        << what << " grad norm, step " << i + from + 1;
  }
}

std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> out;
  for (auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// grid_config's model: V 62, C 48, 16 positions, 4 blocks, in f32 elements.
constexpr int64_t kGridParams = 62 * 48 + 16 * 48 + 4 * (12 * 48 * 48 + 13 * 48) + 2 * 48;

// Every rank's bytes read, on rank 0 (index = world rank).
std::vector<uint64_t> all_bytes(uint64_t mine) {
  std::vector<uint64_t> all(static_cast<size_t>(world_size()));
  MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  return all;
}

// The fixture's sizes, in f32 elements (HF names; lm_head tied, not stored).
constexpr int64_t C = 64, V = 256, P = 32;
constexpr int64_t kBlock = 12 * C * C + 13 * C;  // ln_1, c_attn (C, 3C), c_proj (C, C), ln_2, c_fc (C, 4C), proj (4C, C)
constexpr int64_t kFile = V * C + P * C + 2 * kBlock + 2 * C;  // wte, wpe, 2 blocks, ln_f

}  // namespace

TEST(ShardedLoad, EachPipelineStageReadsOnlyItsTensors) {
  if (world_size() != 4) GTEST_SKIP() << "pp 4 needs 4 ranks";
  for (const std::string& src : {kFixture, work_dir() + "/hf_sharded"}) {
    TrainConfig c = fixture_config(src);
    c.pp = 4;  // one layer per stage: [embedding], [block 0], [block 1], [head]
    Outcome r = run_layout(c, "pp4_load");
    expect_reference_curve(r, "pp 4 from " + src);
    const std::vector<uint64_t> got = all_bytes(r.bytes_read);
    const std::vector<int64_t> want{V * C + P * C, kBlock, kBlock, 2 * C + V * C};  // the head reads its own wte
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(got[static_cast<size_t>(s)], 4u * static_cast<uint64_t>(want[static_cast<size_t>(s)])) << "stage " << s;
      EXPECT_LT(got[static_cast<size_t>(s)], 4u * static_cast<uint64_t>(kFile)) << "stage " << s << " read the whole file";
    }
  }
}

TEST(ShardedLoad, TensorParallelRanksReadOnlyTheirSlices) {
  if (world_size() != 4) GTEST_SKIP() << "tp 2 × pp 2 needs 4 ranks";
  TrainConfig c = fixture_config(work_dir() + "/hf_sharded");
  c.tp = 2;
  c.pp = 2;  // stages [embedding, block 0] and [block 1, head]
  c.schedule = Schedule::gpipe;
  Outcome r = run_layout(c, "tp2pp2_load");
  expect_reference_curve(r, "tp 2 × pp 2 from the sharded copy");
  // a block's tp-2 share: c_attn, c_fc, both c_proj weights and the column biases halved;
  // LayerNorms and the row-parallel biases whole
  const int64_t block = (3 * C * C + C * C + 4 * C * C + 4 * C * C) / 2 + (3 * C + 4 * C) / 2 + 2 * C + 4 * C;
  const std::vector<uint64_t> got = all_bytes(r.bytes_read);
  for (int rank = 0; rank < 4; ++rank) {  // rank = pp · 2 + tp
    const int64_t want = rank < 2 ? V / 2 * C + P * C + block : block + 2 * C + V / 2 * C;
    EXPECT_EQ(got[static_cast<size_t>(rank)], 4u * static_cast<uint64_t>(want)) << "rank " << rank;
  }
}

// ZeRO-3 at dp 4 reads only its pieces (runtime/parallel/zero3.h, "Start"): of each unit — wte
// (tied: a unit of its own), wpe, each block, ln_f, flattened and padded to a multiple of 4 — a
// rank reads elements [r·S, (r+1)·S) below the unit's size from --init-from (the HF fixture, no
// checksums: exactly those bytes; all four ranks together read the fixture once). Resuming its
// own checkpoint of step 3, whose every 64 KiB chunk carries a checksum, it reads the chunks its
// pieces touch, whole, to check them (runtime/io/safetensors_checksums.h): each of the fixture's
// tensors is at most one chunk (asserted), so each tensor a piece touches is read whole — of the
// weights and of AdamW's two moments (+ the optimizer's step scalar). Every rank's bytes equal
// those closed forms exactly. Steps 1-3 and the resumed 4-5 follow transformers' curve (1e-5).
TEST(ShardedLoad, ZeroThreeRanksReadOnlyTheirPieces) {
  if (world_size() != 4) GTEST_SKIP() << "dp 4 needs 4 ranks";
  const std::vector<int64_t> units{V * C, P * C, kBlock, kBlock, 2 * C};
  auto pieces = [&](int r) {  // this rank's elements of every unit, padding excluded
    int64_t n = 0;
    for (int64_t u : units) {
      const int64_t s = (u + 3) / 4;
      n += std::clamp<int64_t>(u - r * s, 0, s);
    }
    return n;
  };
  auto ref = nlohmann::json::parse(std::ifstream(kFixture + "/reference.json"));
  auto expect_steps = [&](const Outcome& got, size_t from, const std::string& what) {
    for (size_t i = 0; i < got.loss.size(); ++i) {
      const double l = ref["steps"][i + from]["loss"].get<double>(), g = ref["steps"][i + from]["grad_norm"].get<double>();
      EXPECT_NEAR(got.loss[i], l, 1e-5 * l) << what << " loss, step " << i + from + 1;
      EXPECT_NEAR(got.grad_norm[i], g, 1e-5 * g) << what << " grad norm, step " << i + from + 1;
    }
  };
  TrainConfig c = fixture_config(kFixture);
  c.dp = 4;
  c.grad_accum = 1;
  c.zero = 3;
  c.steps = 3;
  c.checkpoint_dir = work_dir() + "/zero3_ckpt";
  if (world_rank() == 0) fs::remove_all(c.checkpoint_dir);
  barrier();
  const Outcome a = run_layout(c, "zero3_load");
  ASSERT_EQ(a.loss.size(), 3u);
  expect_steps(a, 0, "zero 3 from the fixture");
  c.steps = 5;
  c.resume = true;
  const Outcome b = run_layout(c, "zero3_resume");
  ASSERT_EQ(b.loss.size(), 2u);
  expect_steps(b, 3, "zero 3 resumed");
  const SafetensorsStore opt(c.checkpoint_dir + "/step_00000003", "optimizer");
  const uint64_t step_bytes = static_cast<uint64_t>(shape_numel(opt.entry("step").shape)) * dtype_size(opt.entry("step").dtype);
  // each unit's tensors in order (registration order, as Zero3 flattens them), in elements
  std::vector<std::vector<int64_t>> unit_tensors{{V * C}, {P * C}, {}, {}, {}};
  auto fixture_model = models::load_hf_gpt2(kFixture, std::make_shared<Generator>(0));
  for (const auto& [name, p] : fixture_model->named_parameters()) {
    ASSERT_LE(4 * p.numel(), 65536) << name << " is more than one checksum chunk: the closed form below needs one";
    if (name.rfind("transformer.h.", 0) == 0) unit_tensors[2 + std::stoi(name.substr(14))].push_back(p.numel());
    if (name.rfind("transformer.ln_f.", 0) == 0) unit_tensors[4].push_back(p.numel());
  }
  auto touched = [&](int r) {  // elements of the tensors rank r's pieces touch, whole
    int64_t n = 0;
    for (const auto& ts : unit_tensors) {
      int64_t numel = 0, off = 0;
      for (int64_t t : ts) numel += t;
      EXPECT_GT(numel, 0);
      const int64_t s = (numel + 3) / 4, lo = r * s, hi = std::min(numel, (r + 1) * s);
      for (int64_t t : ts) {
        if (std::max(off, lo) < std::min(off + t, hi)) n += t;
        off += t;
      }
    }
    return n;
  };
  const std::vector<uint64_t> from_fixture = all_bytes(a.bytes_read), resumed = all_bytes(b.bytes_read);
  uint64_t all = 0;
  for (int r = 0; r < 4; ++r) {
    const uint64_t mine = 4u * static_cast<uint64_t>(pieces(r));
    EXPECT_EQ(from_fixture[static_cast<size_t>(r)], mine) << "rank " << r << ", --init-from";
    EXPECT_EQ(resumed[static_cast<size_t>(r)], 3 * 4u * static_cast<uint64_t>(touched(r)) + step_bytes)
        << "rank " << r << ", --resume";
    EXPECT_LT(touched(r), kFile) << "rank " << r << " read the whole model";
    all += from_fixture[static_cast<size_t>(r)];
  }
  EXPECT_EQ(all, 4u * static_cast<uint64_t>(kFile));
}

TEST(ShardedSave, PipelineTimesTensorParallelCheckpointResumesAsDataParallelAndOneProcess) {
  if (world_size() != 4) GTEST_SKIP() << "pp 2 × tp 2 needs 4 ranks";
  const TrainConfig c = grid_config();
  const Outcome want = one_process(c);
  TrainConfig a = c;
  a.pp = 2;
  a.tp = 2;
  a.steps = 3;
  a.checkpoint_dir = work_dir() + "/ckpt_grid";
  if (world_rank() == 0) fs::remove_all(a.checkpoint_dir);
  barrier();
  expect_same(run_layout(a, "grid_a"), Outcome{{want.loss.begin(), want.loss.begin() + 3},
                                               {want.grad_norm.begin(), want.grad_norm.begin() + 3}, 0},
              0, "pp 2 × tp 2 before the checkpoint");
  const std::string step3 = a.checkpoint_dir + "/step_00000003";
  if (world_rank() == 0) {
    // every rank wrote a file (tp rank 0: its stage's replicated tensors and half the split
    // ones, tp rank 1 the other half); the index names each parameter once, in bytes the model's
    std::set<std::string> want_files{"config.json", "generation_config.json", "state.json",
                                     "model.safetensors.index.json", "optimizer.safetensors.index.json"};
    for (int k = 1; k <= 4; ++k)
      for (const char* base : {"model", "optimizer"}) want_files.insert(shard_file_name(base, k, 4));
    EXPECT_EQ(files_in(step3), want_files);
    auto index = nlohmann::json::parse(std::ifstream(step3 + "/model.safetensors.index.json"));
    EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), 4 * kGridParams);
    EXPECT_EQ(index["weight_map"].size(), 4u + 12u * 4u);  // wte, wpe, ln_f.{w,b} + 12 per block
    for (int k = 1; k <= 4; ++k)  // transformers reads only "pt"-tagged safetensors
      EXPECT_EQ(SafetensorsReader(step3 + "/" + shard_file_name("model", k, 4)).metadata().at("format"), "pt");
    auto opt = nlohmann::json::parse(std::ifstream(step3 + "/optimizer.safetensors.index.json"));
    EXPECT_EQ(opt["metadata"]["total_size"].get<int64_t>(), 8 * kGridParams + 8);  // exp_avg, exp_avg_sq; step
    // the directory as a Hugging Face GPT-2 (config.json + the sharded weights), as from_pretrained reads it
    auto hf = models::load_hf_gpt2(step3, std::make_shared<Generator>(0));
    EXPECT_EQ(hf->num_parameters(), kGridParams);
  }
  TrainConfig b = c;  // dp 4: B 1 × K 1 × 4 = the same global batch
  b.dp = 4;
  b.micro_batch = 1;
  b.grad_accum = 1;
  b.resume = true;
  b.checkpoint_dir = work_dir() + "/ckpt_grid_b";
  if (world_rank() == 0) {
    fs::remove_all(b.checkpoint_dir);
    fs::create_directories(b.checkpoint_dir);
    fs::copy(step3, b.checkpoint_dir + "/step_00000003");
  }
  barrier();
  expect_same(run_layout(b, "grid_b"), want, 3, "pp 2 × tp 2 checkpoint resumed as dp 4");
  if (world_rank() == 0) {  // and by one process
    TrainConfig one = c;
    one.resume = true;
    one.checkpoint_dir = a.checkpoint_dir;
    expect_same(one_process(one), want, 3, "pp 2 × tp 2 checkpoint resumed by one process");
  }
  barrier();
}

TEST(ShardedSave, ACrashBeforeTheRenameLeavesThePreviousCheckpointAndItsLeftoversAreIgnored) {
  if (world_size() != 4) GTEST_SKIP() << "pp 2 × tp 2 needs 4 ranks";
  const TrainConfig c = grid_config();
  const Outcome want = one_process(c);
  const std::string root = work_dir() + "/ckpt_crash";
  if (world_rank() == 0) fs::remove_all(root);
  barrier();
  TrainConfig a = c;
  a.pp = 2;
  a.tp = 2;
  a.steps = 2;
  a.checkpoint_dir = root;
  run_layout(a, "crash_a");
  // the same layout goes on, checkpointing every step, and every rank stops right before the
  // rename of step 3
  TrainConfig b = a;
  b.steps = 4;
  b.resume = true;
  b.checkpoint_every = 1;
  TrainSeams crash;
  crash.crash_before_commit = true;
  EXPECT_THROW(run_parallel_training(b, crash), Error);
  barrier();
  if (world_rank() == 0) {
    EXPECT_EQ(CheckpointDir(root).latest(), root + "/step_00000002");
    ASSERT_TRUE(fs::exists(root + "/.tmp-step_00000003/model-00004-of-00004.safetensors"));  // the crash's leftovers
    // and what the old per-rank file gather left after a crash: a stale optimizer part
    fs::create_directories(root + "/.gather-optimizer");
    save_safetensors(root + "/.gather-optimizer/rank1.safetensors",
                     {{"exp_avg.transformer.wte.weight", Tensor::zeros({62, 48})}});
  }
  barrier();
  // another layout resumes from step 2, checkpointing step 3 again: one file per part now
  TrainConfig d = c;
  d.dp = 4;
  d.micro_batch = 1;
  d.grad_accum = 1;
  d.resume = true;
  d.checkpoint_dir = root;
  d.checkpoint_every = 1;
  expect_same(run_layout(d, "crash_d"), want, 2, "dp 4 resumed after the crash");
  if (world_rank() == 0) {
    EXPECT_EQ(files_in(root + "/step_00000003"), (std::set<std::string>{"config.json", "generation_config.json", "state.json",
                                                                        "model.safetensors", "optimizer.safetensors"}));
    EXPECT_TRUE(CheckpointDir(root).stale().empty());  // the .tmp-* and .gather-* are gone
    TrainConfig one = c;  // step 3 as dp 4 wrote it continues the one-process curve
    one.resume = true;
    one.checkpoint_dir = root + "_copy";
    fs::remove_all(one.checkpoint_dir);
    fs::create_directories(one.checkpoint_dir);
    fs::copy(root + "/step_00000003", one.checkpoint_dir + "/step_00000003");
    expect_same(one_process(one), want, 3, "dp 4's step-3 checkpoint resumed by one process");
  }
  barrier();
}
