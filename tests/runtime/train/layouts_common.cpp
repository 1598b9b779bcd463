// The layout tests' shared helpers and main (layouts_common.h says what they are and why the
// tolerance is what it is).
#include "tests/runtime/train/layouts_common.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <tuple>

#include "comm/mpi_env.h"
#include "ops/cpu/sgemm.h"
#include "runtime/data/token_data.h"
#include "runtime/train/parallel_training.h"
#include "runtime/train/trainer.h"
#include "tensor/philox.h"
#include "tests/support/test_comm_options.h"

namespace st::layouts {

using namespace st::runtime;
namespace fs = std::filesystem;

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

std::string work_dir() {
  static std::string dir = [] {
    // one folder per ctest (the strict-p2p twin of a rank count may run beside it under ctest -j)
    const char* p2p = std::getenv("SHARDTRAIN_P2P");
    std::string d = std::string(ST_TEST_BINARY_DIR) + "/layouts_np" + std::to_string(world_size()) +
                    (p2p && *p2p ? std::string("_") + p2p : std::string());
    if (world_rank() == 0) {
      fs::remove_all(d);
      fs::create_directories(d);
      std::vector<uint16_t> tokens(20000);
      for (size_t i = 0; i < tokens.size(); ++i)  // a learnable stream: mostly i mod 37, some noise
        tokens[i] = static_cast<uint16_t>(philox_uniform(3, i) < 0.8f ? i % 37 : (philox4x32_10(4, i).x[0] % 62));
      write_token_file(d + "/tokens.bin", tokens);
    }
    barrier();
    return d;
  }();
  return dir;
}

TrainConfig llama_config() {
  TrainConfig c = base_config();
  c.model = "llama";
  c.kv_heads = 2;
  c.ffn = 48;
  c.rope_theta = 500000;
  c.tie_embeddings = 0;
  return c;
}

TrainConfig base_config() {
  TrainConfig c;
  c.model = "gpt";
  c.layers = 4;
  c.d_model = 32;
  c.heads = 4;
  c.vocab = 64;
  c.seq_len = 16;
  c.micro_batch = 2;
  c.grad_accum = 2;
  c.steps = 5;
  c.lr = 3e-3;
  c.weight_decay = 0.1;
  c.clip = 1.0;
  c.data = work_dir() + "/tokens.bin";
  c.progress = false;
  c.log_every = 1000;
  c.timeout_s = 120;
  c.comm_options = testing_support::test_comm_options();  // the _strict registration's p2p mode
  return c;
}

Curve one_process(TrainConfig c, const TrainSeams& seams) {
  c.dp = 1;
  c.tp = c.pp = c.cp = 1;
  c.schedule = Schedule::one_f_one_b;
  c.virtual_stages = 1;
  c.zero = false;
  c.metrics.clear();
  c.checkpoint_dir.clear();
  c.resume = false;
  Trainer t(c, seams);
  Curve r;
  for (int64_t s = 0; s < c.steps; ++s) {
    StepMetrics m = t.train_step();
    r.loss.push_back(m.loss);
    r.grad_norm.push_back(m.grad_norm);
    r.loss_scale.push_back(m.loss_scale);
    r.skipped.push_back(m.skipped);
    if (m.fp8_overflow) r.fp8_overflow.push_back(static_cast<double>(*m.fp8_overflow));
    if (m.fp8_underflow) r.fp8_underflow.push_back(static_cast<double>(*m.fp8_underflow));
  }
  return r;
}

double rel(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-30); }

// `c` computed on rank `root` given to every rank (its steps' loss, grad norm, scale, skip flag,
// fp8 counts: −1 for none, exact in a double below 2^53); `failed` on the root (its run threw)
// makes every rank throw, so none waits for it.
static void share(Curve& c, int root, bool failed) {
  uint64_t n = failed ? UINT64_MAX : c.loss.size();
  MPI_Bcast(&n, 1, MPI_UINT64_T, root, MPI_COMM_WORLD);
  if (n == UINT64_MAX) throw std::runtime_error("a reference run threw on rank " + std::to_string(root));
  std::vector<double> flat(6 * n);
  if (world_rank() == root)
    for (size_t i = 0; i < n; ++i) {
      std::tie(flat[i], flat[n + i], flat[2 * n + i], flat[3 * n + i]) =
          std::tuple(c.loss[i], c.grad_norm[i], c.loss_scale[i], c.skipped[i] ? 1.0 : 0.0);
      flat[4 * n + i] = c.fp8_overflow.empty() ? -1.0 : c.fp8_overflow[i];
      flat[5 * n + i] = c.fp8_underflow.empty() ? -1.0 : c.fp8_underflow[i];
    }
  MPI_Bcast(flat.data(), static_cast<int>(flat.size()), MPI_DOUBLE, root, MPI_COMM_WORLD);
  c.loss.assign(flat.begin(), flat.begin() + n);
  c.grad_norm.assign(flat.begin() + n, flat.begin() + 2 * n);
  c.loss_scale.assign(flat.begin() + 2 * n, flat.begin() + 3 * n);
  c.skipped.assign(n, false);
  for (size_t i = 0; i < n; ++i) c.skipped[i] = flat[3 * n + i] != 0;
  const bool fp8 = n > 0 && flat[4 * n] >= 0;
  c.fp8_overflow.assign(fp8 ? flat.begin() + 4 * n : flat.end(), fp8 ? flat.begin() + 5 * n : flat.end());
  c.fp8_underflow.assign(fp8 ? flat.begin() + 5 * n : flat.end(), fp8 ? flat.begin() + 6 * n : flat.end());
}

// The reference and its noise envelope (layouts_common.h, "The noise of a run"). Its three runs
// are one-process runs (no communicator) that give the same bits on every rank (docs/testing.md,
// "CPU numerics"): run k is computed by rank k mod world size alone and broadcast, rather than by
// every rank (which cost world-size times the CPU: most of this binary's time under mpirun).
Curve reference(TrainConfig c, int64_t dp, const TrainSeams& seams) {
  c.grad_accum *= dp;
  TrainConfig re = c;
  if (c.grad_accum > 1) {
    re.micro_batch = c.micro_batch * c.grad_accum;
    re.grad_accum = 1;
  } else {
    re.micro_batch = 1;
    re.grad_accum = c.micro_batch;
  }
  Curve runs[3];  // the reference, the resplit, the blocked (kc 8)
  bool failed[3] = {false, false, false};
  for (int k = 0; k < 3; ++k) {
    if (k % world_size() != world_rank()) continue;
    const int64_t kc = k == 2 ? ops::cpu::sgemm_set_depth_block(8) : 0;
    try {
      runs[k] = one_process(k == 1 ? re : c, seams);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: reference run %d threw: %s\n", world_rank(), k, e.what());
      failed[k] = true;
    }
    if (k == 2) ops::cpu::sgemm_set_depth_block(kc);
  }
  for (int k = 0; k < 3; ++k) share(runs[k], k % world_size(), failed[k]);
  Curve r = runs[0];
  const Curve &resplit = runs[1], &blocked = runs[2];
  double ln = 0, nn = 0;
  for (size_t i = 0; i < r.loss.size(); ++i) {
    for (const Curve* o : {&resplit, &blocked}) {
      ln = std::max(ln, rel(o->loss[i], r.loss[i]));
      nn = std::max(nn, rel(o->grad_norm[i], r.grad_norm[i]));
    }
    r.loss_noise.push_back(ln);
    r.norm_noise.push_back(nn);
  }
  return r;
}

Curve reference_of(TrainConfig c) {
  const int64_t dp = c.dp > 0 ? c.dp : world_size() / (c.tp * c.cp * c.pp);  // dp 0: the rest of the world
  c.cp = 1;
  c.dp = 1;
  c.tp = 1;
  return reference(c, dp);
}

Curve first_steps(Curve c, size_t n) {
  for (auto* v : {&c.loss, &c.grad_norm, &c.loss_noise, &c.norm_noise}) v->resize(n);
  return c;
}

void expect_bf16_like_one_process(TrainConfig c, const std::string& name, const std::string& what) {
  const Curve f32 = reference_of(c);
  c.precision = Precision::bf16;
  const Curve want = reference_of(c);
  Curve extra = want;  // the bf16 reference's distance to f32, per step
  for (size_t i = 0; i < want.loss.size(); ++i) {
    extra.loss[i] = rel(want.loss[i], f32.loss[i]);
    extra.grad_norm[i] = rel(want.grad_norm[i], f32.grad_norm[i]);
  }
  const Curve got = run_layout(c, name);
  expect_same(got, want, what, 0, &extra);
  ASSERT_EQ(got.loss.size(), f32.loss.size());
  for (size_t i = 0; i < got.loss.size(); ++i) {
    EXPECT_NEAR(got.loss[i], f32.loss[i], 0.02 * f32.loss[i]) << what << " vs f32, step " << i + 1;
    if (world_rank() == 0 && std::getenv("ST_LAYOUT_NOISE_LOG"))
      std::printf("%s step %zu: loss %.3g (allowance %.3g), norm %.3g (allowance %.3g)\n", what.c_str(), i + 1,
                  rel(got.loss[i], want.loss[i]), extra.loss[i], rel(got.grad_norm[i], want.grad_norm[i]),
                  extra.grad_norm[i]);
  }
}

namespace {

// The last line of a metrics file, parsed.
nlohmann::json last_metrics(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) last = line;
  return nlohmann::json::parse(last);
}

}  // namespace

int64_t last_act_peak(const std::string& name) {
  return last_metrics(work_dir() + "/" + name + ".jsonl")["mem_act_peak"].get<int64_t>();
}

void expect_val_loss_like_one_process(TrainConfig c, const std::string& name, const std::string& what) {
  const Curve want = reference_of(c);
  double one = 0;
  if (world_rank() == 0) {  // one process, no communicator
    TrainConfig o = c;
    o.cp = o.pp = 1;
    o.metrics = work_dir() + "/" + name + "_one.jsonl";
    fs::remove(o.metrics);
    Trainer(o).run();
    one = last_metrics(o.metrics)["val_loss"].get<double>();
  }
  run_layout(c, name);
  if (world_rank() == 0) {
    const double got = last_metrics(work_dir() + "/" + name + ".jsonl")["val_loss"].get<double>();
    const size_t k = want.loss.size() - 1;
    EXPECT_LE(rel(got, one), kNoiseMultiple * std::max(want.loss_noise[k], kNoiseFloor))
        << what << ": val loss " << got << " vs one process " << one;
  }
}

Curve run_layout(TrainConfig c, const std::string& name, const TrainSeams& seams) {
  c.metrics = work_dir() + "/" + name + ".jsonl";
  if (world_rank() == 0) fs::remove(c.metrics);
  barrier();
  EXPECT_EQ(run_parallel_training(c, seams), 0);
  barrier();
  Curve r;
  std::ifstream in(c.metrics);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    r.loss.push_back(j["loss"].get<double>());
    r.grad_norm.push_back(j["grad_norm"].is_number() ? j["grad_norm"].get<double>() : NAN);
    r.loss_scale.push_back(j["loss_scale"].get<double>());
    r.skipped.push_back(j["skipped"].get<bool>());
    if (j.contains("fp8_overflow")) r.fp8_overflow.push_back(static_cast<double>(j["fp8_overflow"].get<int64_t>()));
    if (j.contains("fp8_underflow")) r.fp8_underflow.push_back(static_cast<double>(j["fp8_underflow"].get<int64_t>()));
  }
  barrier();  // every rank has read the file before rank 0 may remove it for the next run
  return r;
}

void expect_same(const Curve& got, const Curve& want, const std::string& what, size_t from, const Curve* extra) {
  ASSERT_EQ(got.loss.size(), want.loss.size() - from) << what << ": number of steps";
  ASSERT_EQ(want.loss_noise.size(), want.loss.size()) << what << ": the reference has no noise measured";
  double worst = 0, widest = 0;
  for (size_t i = 0; i < got.loss.size(); ++i) {
    const size_t k = i + from;
    const double tl = kNoiseMultiple * std::max(want.loss_noise[k], kNoiseFloor) + (extra ? extra->loss[k] : 0.0);
    const double tn = kNoiseMultiple * std::max(want.norm_noise[k], kNoiseFloor) + (extra ? extra->grad_norm[k] : 0.0);
    const double dl = rel(got.loss[i], want.loss[k]), dn = rel(got.grad_norm[i], want.grad_norm[k]);
    EXPECT_LE(dl, tl) << what << " loss, step " << k + 1 << ": " << got.loss[i] << " vs " << want.loss[k]
                      << " (noise " << want.loss_noise[k] << ")";
    EXPECT_LE(dn, tn) << what << " grad norm, step " << k + 1 << ": " << got.grad_norm[i] << " vs " << want.grad_norm[k]
                      << " (noise " << want.norm_noise[k] << ")";
    worst = std::max({worst, dl / std::max(want.loss_noise[k], kNoiseFloor), dn / std::max(want.norm_noise[k], kNoiseFloor)});
    widest = std::max({widest, tl, tn});
  }
  if (world_rank() == 0 && std::getenv("ST_LAYOUT_NOISE_LOG"))  // to re-derive kNoiseMultiple
    std::printf("noise ratio %-60s %.3g (widest tolerance %.2g)\n", what.c_str(), worst, widest);
}

}  // namespace st::layouts

int main(int argc, char** argv) {
  int provided;
  st::comm::apply_mpi_defaults();
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  if (st::layouts::world_rank() != 0) ::testing::GTEST_FLAG(brief) = true;
  int rc = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
