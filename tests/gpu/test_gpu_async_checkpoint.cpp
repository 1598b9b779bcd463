// The asynchronous checkpoint's CUDA path (runtime/parallel/state_sharding.h's HostStaging): a
// snapshot of CUDA tensors, taken and then followed at once by kernels that overwrite the
// originals (what the next training step does to weights and moments), is written with the values
// the tensors held at the snapshot, bit for bit — the device copy is ordered after the values and
// before the overwrite, the download on the copy stream waits for it, and the writer waits for
// the download. Sizes from 4 bytes to 64 MiB (the large ones keep the copy stream busy while the
// overwrites run). A second snapshot into the same staging (reused, as from one save to the next)
// likewise. Fails without the device copy (the download would race the overwrite) or the fence.
// A CPU tensor among them (the optimizer's step count, at the block's start) keeps its bytes,
// though the download covers the whole block (it held the device block's unwritten bytes before
// 2026-12-06), and a rewrite of it after the snapshot lands. Tensors of a block downloaded
// directly (the optimizer's snapshot copies) and packed ones in one snapshot; the trainer's saves
// (graph and eager, bf16 and fp8) byte for byte its synchronous ones.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "../models/train_helpers.h"
#include "../support/checkpoint_files.h"
#include "runtime/io/safetensors.h"
#include "runtime/parallel/state_sharding.h"
#include "runtime/train/trainer.h"
#include "tensor/cuda/runtime.h"
#include "tensor/rng.h"
#include "tensor/tensor.h"

using namespace st;
using namespace st::runtime;
namespace fs = std::filesystem;

namespace {

// Normal values on the CPU (seeded), moved to CUDA.
Tensor cuda_normal(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Generator gen(seed);
  fill_normal(t, gen);
  return t.to(Device::cuda);
}

void expect_bits(const Tensor& got, const Tensor& want, const std::string& name) {
  ASSERT_EQ(got.shape(), want.shape()) << name;
  ASSERT_EQ(got.nbytes(), want.nbytes()) << name;
  EXPECT_EQ(std::memcmp(got.data_ptr(), want.data_ptr(), want.nbytes()), 0) << name << " differs";
}

}  // namespace

TEST(GpuAsyncCheckpoint, TheSnapshotHoldsTheValuesOfItsStepWhileTheNextStepOverwritesThem) {
  const std::string dir = (fs::temp_directory_path() / "st_gpu_async_checkpoint").string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto host = std::make_shared<HostStaging>();
  for (int save = 0; save < 2; ++save) {
    NamedTensors state;  // on CUDA, f32, after a CPU i64 counter first (as the optimizer's "step")
    state.push_back({"step", Tensor::from_vector(std::vector<int64_t>{1000 + save}, {1})});
    state.push_back({"scalar", cuda_normal({1}, 10 + save)});
    state.push_back({"small", cuda_normal({3, 5}, 20 + save)});
    state.push_back({"large", cuda_normal({4096, 4096}, 30 + save)});  // 64 MiB
    state.push_back({"odd", cuda_normal({1023, 17}, 40 + save)});
    std::vector<Tensor> want;
    for (auto& [name, t] : state) want.push_back(t.to(Device::cpu).clone());  // a copy: the CPU counter is overwritten too
    const PartSnapshot snap = snapshot_parts("model", state, nullptr, nullptr, StateSharding{}, host);
    if (save == 1) {  // a counter known after the snapshot (the trainer's early snapshot)
      rewrite_snapshot_entry(snap, "step", Tensor::from_vector(std::vector<int64_t>{2001}, {1}));
      want[0] = Tensor::from_vector(std::vector<int64_t>{2001}, {1});
    }
    for (int k = 0; k < 20; ++k)  // the next steps: kernels on the current stream over the originals
      for (auto& [name, t] : state) t.fill_(static_cast<double>(k + 1));
    const std::string sub = dir + "/save" + std::to_string(save);
    fs::create_directories(sub);
    write_snapshot(sub, snap);  // waits for the downloads first
    host->release();
    const auto got = load_safetensors(sub + "/model.safetensors");
    for (size_t i = 0; i < state.size(); ++i) expect_bits(got.at(state[i].first), want[i], state[i].first);
    EXPECT_EQ(state[3].second.to(Device::cpu).data<float>()[0], 20.0f);  // the overwrite did run ("large")
  }
  fs::remove_all(dir);
}

// Tensors inside the block given to download_directly (the optimizer's snapshot copies) go to the
// host from where they are, after what wrote them (a kernel filling them just before the
// snapshot), while the others are packed in runs between them — the device block holds those
// alone — and overwritten at once. Every tensor lands bit for bit, the CPU counter too.
TEST(GpuAsyncCheckpoint, TensorsOfTheDirectBlockAreDownloadedFromWhereTheyAreAndTheRestPacked) {
  const std::string dir = (fs::temp_directory_path() / "st_gpu_async_direct").string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  const int64_t big = 4096 * 4096;  // 64 MiB of f32
  Tensor block = Tensor::empty({2 * big + 64}, DType::f32, Device::cuda);
  Tensor big1 = block.narrow(0, 0, big).view({4096, 4096}), big2 = block.narrow(0, big + 64, big).view({4096, 4096});
  big1.copy_(cuda_normal({4096, 4096}, 1));
  big2.copy_(cuda_normal({4096, 4096}, 2));
  NamedTensors state;  // runs: [a] big1 [b] big2 [c], the CPU counter first
  state.push_back({"step", Tensor::from_vector(std::vector<int64_t>{7}, {1})});
  state.push_back({"a", cuda_normal({3, 5}, 3)});
  state.push_back({"big1", big1});
  state.push_back({"b", cuda_normal({1023, 17}, 4)});
  state.push_back({"big2", big2});
  state.push_back({"c", cuda_normal({7}, 5)});
  for (int k = 0; k < 3; ++k) big1.add_(big2);  // what wrote the block, just before (on the stream)
  std::vector<Tensor> want;
  for (auto& [name, t] : state) want.push_back(t.to(Device::cpu).clone());
  auto host = std::make_shared<HostStaging>();
  host->download_directly(block);
  const PartSnapshot snap = snapshot_parts("model", state, nullptr, nullptr, StateSharding{}, host);
  const size_t packed = (15 + 1023 * 17 + 7) * sizeof(float);
  EXPECT_GE(host->device_bytes(), packed);
  EXPECT_LT(host->device_bytes(), packed + 256) << "the direct tensors were packed too";
  for (int k = 0; k < 20; ++k)  // the next steps overwrite the packed ones' originals
    for (const char* name : {"a", "b", "c"})
      for (auto& [n, t] : state)
        if (n == name) t.fill_(static_cast<double>(k + 1));
  write_snapshot(dir, snap);
  host->release();
  const auto got = load_safetensors(dir + "/model.safetensors");
  for (size_t i = 0; i < state.size(); ++i) expect_bits(got.at(state[i].first), want[i], state[i].first);
  fs::remove_all(dir);
}

// The trainer's asynchronous save in the graph mode: the snapshot of step s is taken right after
// s's launch, its pack queued behind s on the training stream, and handed to the writer after
// s + 1's launch (runtime/train/trainer.h snapshot_early), while the next steps overwrite weights,
// moments and, under --precision fp8 with delayed scaling, the scaling states. The model has a
// large state under a small step (a 262 144-token embedding of width 512: 134 M parameters, 1.6 GB
// of AdamW state, under a forward and backward of 32 tokens), the shape in which a pack that ran
// beside the next step without its optimizer waiting would be overtaken. Every file of every save
// is byte for byte the synchronous save's (the same run, saving at the step boundary). The masters
// and moments come from the optimizer's snapshot block (written by the due step's update), the FP8
// states from the pack. The eager mode (the snapshot at the step boundary) likewise.
namespace {
void expect_async_equals_sync(runtime::Precision precision, bool graph = true) {
  auto run = [&](bool async, const std::string& name) {
    runtime::TrainConfig c = st::testing::reference_config();  // the fixture's tokens, AdamW, clip 1
    c.init_from.clear();
    c.model = "gpt";
    c.vocab = 262144;
    c.d_model = 512;
    c.heads = 4;
    c.layers = 1;
    c.micro_batch = 1;
    c.seq_len = 32;
    c.precision = precision;
    if (precision == runtime::Precision::fp8) c.fp8_scaling = ops::Fp8ScaleMode::delayed;
    c.device = Device::cuda;
    c.cuda_graph = graph;
    c.steps = 9;
    c.checkpoint_dir = st::testing::temp_dir(name);
    c.checkpoint_every = 3;
    c.keep_checkpoints = 0;
    c.async_checkpoint = async;
    runtime::Trainer t(c);
    EXPECT_EQ(t.cuda_graph(), graph) << name;
    t.run();
    return c.checkpoint_dir;
  };
  const std::string tag = std::string(runtime::to_string(precision)) + (graph ? "" : "_eager");
  const std::string sync = run(false, "gpu_async_sync_" + tag), async = run(true, "gpu_async_async_" + tag);
  for (int64_t step : {3, 6, 9}) st::testing_support::expect_same_files(sync, async, step, tag + " asynchronous save");
  fs::remove_all(sync);
  fs::remove_all(async);
}
}  // namespace

TEST(GpuAsyncCheckpoint, AGraphRunsAsynchronousSaveEqualsTheSynchronousOneWhileItsNextStepRuns) {
  expect_async_equals_sync(runtime::Precision::bf16);
}

TEST(GpuAsyncCheckpoint, Fp8DelayedScalingStatesAreSavedAsTheirStepLeftThem) {
  expect_async_equals_sync(runtime::Precision::fp8);
}

TEST(GpuAsyncCheckpoint, AnEagerRunsAsynchronousSaveEqualsTheSynchronousOne) {
  expect_async_equals_sync(runtime::Precision::bf16, /*graph=*/false);
}
