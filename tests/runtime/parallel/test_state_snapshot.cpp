// snapshot_parts' host layout (runtime/parallel/state_sharding.h): every tensor of a part at a
// 16-byte boundary of the host block, whatever the sizes before it — the optimizer part's 8-byte
// step count first, moments of odd lengths — so that the CUDA pack's sources and destinations
// share their 16-byte alignment (its 16-byte path; 8 bytes off, it moved 4-byte words at half the
// bandwidth). The file written from the snapshot is byte for byte write_parts' (the gaps never
// reach it). Fails when the offsets are packed end to end (the step count puts the first moment
// at 8) or when the writer reads the gaps.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/support/checkpoint_files.h"
#include "runtime/parallel/state_sharding.h"
#include "tensor/rng.h"

using namespace st;
using namespace st::runtime;
namespace fs = std::filesystem;

using st::testing_support::bytes_of;

namespace {
Tensor normal(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Generator gen(seed);
  fill_normal(t, gen);
  return t;
}
}  // namespace

TEST(StateSnapshot, EveryTensorStartsAtASixteenByteBoundaryAndTheFileIsTheSynchronousOnes) {
  NamedTensors state;
  state.push_back({"step", Tensor::from_vector(std::vector<int64_t>{41}, {1})});  // 8 bytes
  state.push_back({"m.a", normal({5}, 1)});          // 20 bytes
  state.push_back({"m.b", normal({3, 7}, 2)});       // 84
  state.push_back({"v.a", normal({5}, 3).to(DType::bf16)});  // 10
  state.push_back({"v.b", normal({1}, 4)});          // 4
  state.push_back({"v.c", normal({64, 3}, 5)});      // 768
  const std::string dir = (fs::temp_directory_path() / ("st_state_snapshot_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  fs::create_directories(dir + "/sync");
  fs::create_directories(dir + "/snap");
  const std::vector<std::string> files = write_parts(dir + "/sync", "optimizer", state, nullptr, nullptr, StateSharding{});
  const PartSnapshot snap = snapshot_parts("optimizer", state, nullptr, nullptr, StateSharding{},
                                           std::make_shared<HostStaging>());
  ASSERT_EQ(snap.offsets.size(), state.size());
  size_t end = 0;
  for (size_t k = 0; k < snap.offsets.size(); ++k) {
    EXPECT_EQ(snap.offsets[k] % kHostAlign, 0u) << snap.specs[k].name << " at " << snap.offsets[k];
    EXPECT_GE(snap.offsets[k], end) << snap.specs[k].name << " overlaps the tensor before it";
    end = snap.offsets[k] + static_cast<size_t>(shape_numel(snap.specs[k].shape)) * dtype_size(snap.specs[k].dtype);
  }
  EXPECT_GE(snap.host->bytes(), end);
  write_snapshot(dir + "/snap", snap);
  ASSERT_EQ(files.size(), 1u);
  ASSERT_EQ(snap.file, files[0]);
  EXPECT_TRUE(bytes_of(dir + "/sync/" + files[0]) == bytes_of(dir + "/snap/" + snap.file))
      << "the snapshot's file differs from write_parts'";
  fs::remove_all(dir);
}
