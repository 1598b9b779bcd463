// Sharded loading under mpirun -np 4: a rank reads only the tensors it holds, and of a
// tensor-parallel shard only its slices (positioned reads), whether from one model.safetensors
// or from Hugging Face's sharded layout — the bytes each rank reads equal the closed form of its
// share of the HF fixture (2 layers, C 64, V 256, 32 positions), and the curves still equal the
// fixture's transformers run (reference.json) to the 1e-5 of test_layouts.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "comm/mpi_env.h"
#include "runtime/io/safetensors.h"
#include "runtime/train/parallel_training.h"
#include "tests/support/sharded_fixture.h"

using namespace st;
using namespace st::runtime;
namespace fs = std::filesystem;

namespace {

int world_rank() {
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
void barrier() { MPI_Barrier(MPI_COMM_WORLD); }

const std::string kFixture = ST_FIXTURE_DIR;

std::string work_dir() {
  static std::string dir = [] {
    std::string d = std::string(ST_TEST_BINARY_DIR) + "/checkpoint_io_np" + std::to_string(world_size());
    if (world_rank() == 0) {
      fs::remove_all(d);
      fs::create_directories(d);
      st::testing::write_sharded_fixture(kFixture, d + "/hf_sharded", 3);
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
  for (const std::string src : {kFixture, work_dir() + "/hf_sharded"}) {
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

int main(int argc, char** argv) {
  int provided;
  st::comm::apply_mpi_defaults();
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  if (world_rank() != 0) ::testing::GTEST_FLAG(brief) = true;
  int rc = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
