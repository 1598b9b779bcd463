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
// 2026-12-06), and a rewrite of it after the snapshot lands.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "runtime/io/safetensors.h"
#include "runtime/parallel/state_sharding.h"
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
