// SnapshotPlans (runtime/train/snapshot_plans.h): an asynchronous save's plans kept from one save
// to the next, under mpirun -np 1 and 2 (CPU tensors; at np 2 the ranks split the keys, so the file
// names come from both ranks' counts).
//   (1) an unchanged later save builds nothing (builds() stays 1), makes no directory at the step
//       boundary (make_temp: the temporary directory does not exist until the writer makes it),
//       and its files are byte for byte the synchronous save's of the same values, taken when the
//       snapshot was (the tensors are changed after it, before the write);
//   (2) a shape changed on the last rank only rebuilds on every rank (builds() 2 everywhere: the
//       ranks agree, none waits in a collective the other skipped), and so does a dtype, a name,
//       an added entry; each save's files equal the synchronous save's;
//   (3) at np 2 with a tp group of 2 and a split tensor (assembled over the group at every save)
//       every save builds, and the files still equal the synchronous save's.
// Cost: well under a second.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "comm/make_communicator.h"
#include "runtime/io/checkpoint_dir.h"
#include "runtime/train/train_checkpoint.h"
#include "tests/support/mpi_world.h"

using namespace st;
using namespace st::runtime;
namespace fs = std::filesystem;

namespace {

using st::testing::barrier;
using st::testing::world_rank;
using st::testing::world_size;

std::string work_dir() {
  static std::string dir = [] {
    std::string d = std::string(ST_TEST_BINARY_DIR) + "/snapshot_plans_np" + std::to_string(world_size());
    if (world_rank() == 0) {
      fs::remove_all(d);
      fs::create_directories(d);
    }
    barrier();
    return d;
  }();
  return dir;
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every file of A/step_N against B/step_N, byte for byte (rank 0).
void expect_same_files(const std::string& a, const std::string& b, int64_t step) {
  if (world_rank() != 0) return;
  const std::string sa = CheckpointDir(a).path_for(step), sb = CheckpointDir(b).path_for(step);
  ASSERT_TRUE(fs::is_directory(sa)) << sa;
  ASSERT_TRUE(fs::is_directory(sb)) << sb;
  std::set<std::string> fa, fb;
  for (auto& e : fs::directory_iterator(sa)) fa.insert(e.path().filename().string());
  for (auto& e : fs::directory_iterator(sb)) fb.insert(e.path().filename().string());
  ASSERT_EQ(fa, fb) << "step " << step;
  for (const std::string& f : fa)
    EXPECT_TRUE(bytes_of(sa + "/" + f) == bytes_of(sb + "/" + f)) << "step " << step << ": " << f << " differs";
  EXPECT_NO_THROW(open_train_checkpoint(sb));  // the checksums hold
}

Tensor filled(const Shape& shape, float base) {  // base, base + 1, ... : every save's values differ
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + static_cast<float>(i);
  return Tensor::from_vector(v, shape);
}

struct State {
  NamedTensors weights, optimizer;
};

// This rank's tensors (the same names on every rank; which rank writes which is `elsewhere`'s).
State make_state() {
  State s;
  s.weights = {{"h.0.w", filled({4, 6}, 1)}, {"h.0.b", filled({6}, 30)}, {"h.1.w", filled({6, 4}, 40)},
               {"h.1.b", filled({4}, 70)}};
  s.optimizer.emplace_back("step", Tensor::from_vector(std::vector<int64_t>{1}, {1}));
  for (const char* slot : {"exp_avg.", "exp_avg_sq."})
    for (auto& [name, t] : s.weights) s.optimizer.emplace_back(slot + name, filled(t.shape(), 100));
  return s;
}

void add_in_place(State& s, float x) {  // the next step's values, in the same tensors
  for (auto* part : {&s.weights, &s.optimizer})
    for (auto& [name, t] : *part)
      if (name != "step") t.add_(Tensor::full(t.shape(), x, t.dtype()));
}

struct Saver {
  StateSharding sharding;
  WrittenElsewhere elsewhere;
  ShardRule rule;
  SnapshotPlans plans;
  std::string async_root, sync_root;

  // The synchronous save of `s` at `step`, then the asynchronous one's snapshot; the tensors are
  // changed before the snapshot's files are written. Returns the snapshot's make_temp.
  bool save(State& s, int64_t step) {
    TrainState state;
    state.step = step;
    const nlohmann::json config = {{"model_type", "test"}};
    save_train_checkpoint(sync_root, state, config, s.weights, s.optimizer, rule, elsewhere, sharding, 0);
    const CheckpointSnapshot snap = snapshot_train_checkpoint(async_root, state, config, s.weights, s.optimizer,
                                                              rule, elsewhere, sharding, plans);
    barrier();
    const int made_here = fs::exists(snap.tmp) ? 1 : 0;  // by the step boundary, on some rank
    int any_made = 0;
    MPI_Allreduce(&made_here, &any_made, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(any_made == 1, !snap.make_temp)
        << "step " << step << ": the boundary made the directory iff plans were built";
    add_in_place(s, 1000.f);  // the training goes on: the snapshot holds the values it was taken at
    write_checkpoint_snapshot(snap);
    barrier();  // every writer finished (AsyncCheckpointer's exchange)
    plans.release();
    if (snap.lead) commit_train_checkpoint(snap, 0);
    barrier();
    add_in_place(s, -1000.f);
    add_in_place(s, 0.5f);  // the next save's values
    return snap.make_temp;
  }
};

std::shared_ptr<comm::Communicator> world() {
  static auto w = comm::make_communicator("mpi", std::chrono::seconds(120)).world;
  return w;
}

std::string fresh(const std::string& name) {
  const std::string d = work_dir() + "/" + name;
  if (world_rank() == 0) fs::remove_all(d);
  barrier();
  return d;
}

// dp-like: every rank holds every tensor, rank r writes the keys whose index % world is r
// ("step" is rank 0's, snapshot_train_checkpoint's own rule).
Saver replicated(const std::string& name) {
  Saver v;
  v.sharding = StateSharding{world(), nullptr, true};
  v.elsewhere = [](const std::string& key) {
    size_t sum = 0;
    for (char c : key) sum += static_cast<unsigned char>(c);
    return sum % static_cast<size_t>(world_size()) != static_cast<size_t>(world_rank());
  };
  v.async_root = fresh(name + "_async");
  v.sync_root = fresh(name + "_sync");
  return v;
}

TEST(SnapshotPlans, AnUnchangedSaveBuildsNothing) {
  Saver v = replicated("unchanged");
  State s = make_state();
  EXPECT_FALSE(v.save(s, 1));
  EXPECT_EQ(v.plans.builds(), 1);
  expect_same_files(v.sync_root, v.async_root, 1);
  for (int64_t step = 2; step <= 3; ++step) {
    EXPECT_TRUE(v.save(s, step)) << "step " << step << ": the kept plans serve, the writer makes the directory";
    EXPECT_EQ(v.plans.builds(), 1) << "step " << step << ": nothing changed, nothing is built";
    expect_same_files(v.sync_root, v.async_root, step);
  }
}

TEST(SnapshotPlans, AChangedEntryRebuildsOnEveryRank) {
  Saver v = replicated("changed");
  State s = make_state();
  v.save(s, 1);
  const bool last = world_rank() == world_size() - 1;
  // a shape, on the last rank only: every rank rebuilds (at np 2 the other rank's entries are unchanged)
  if (last) s.weights[1].second = filled({7}, 30);
  EXPECT_FALSE(v.save(s, 2));
  EXPECT_EQ(v.plans.builds(), 2) << "a changed shape on rank " << world_size() - 1;
  expect_same_files(v.sync_root, v.async_root, 2);
  EXPECT_TRUE(v.save(s, 3));
  EXPECT_EQ(v.plans.builds(), 2) << "unchanged since the rebuild";
  // a dtype, a name, an added entry: each rebuilds
  s.optimizer[2].second = s.optimizer[2].second.to(DType::bf16);
  EXPECT_FALSE(v.save(s, 4));
  EXPECT_EQ(v.plans.builds(), 3) << "a changed dtype";
  s.weights[3].first = "h.1.bias";
  EXPECT_FALSE(v.save(s, 5));
  EXPECT_EQ(v.plans.builds(), 4) << "a changed name";
  s.weights.emplace_back("h.2.w", filled({2, 2}, 5));
  EXPECT_FALSE(v.save(s, 6));
  EXPECT_EQ(v.plans.builds(), 5) << "an added entry";
  for (int64_t step = 4; step <= 6; ++step) expect_same_files(v.sync_root, v.async_root, step);
}

TEST(SnapshotPlans, TensorParallelSplitsRebuildEverySave) {
  if (world_size() != 2) GTEST_SKIP() << "a tp group of 2";
  Saver v;
  v.sharding = StateSharding{world(), world(), true};
  v.rule = [](const std::string& name) {
    return name.find(".w") != std::string::npos ? ShardSpec::split(0) : ShardSpec::replicate();
  };
  v.elsewhere = [&](const std::string& key) {  // tp 0 writes the replicated ones
    return world_rank() != 0 && key.find(".w") == std::string::npos;
  };
  v.async_root = fresh("tp_async");
  v.sync_root = fresh("tp_sync");
  State s = make_state();  // each rank's shard: the split tensors' halves (rows differ by rank)
  add_in_place(s, static_cast<float>(world_rank()) * 10.f);
  for (int64_t step = 1; step <= 3; ++step) {
    EXPECT_FALSE(v.save(s, step));
    EXPECT_EQ(v.plans.builds(), step) << "split tensors are assembled at every save";
    expect_same_files(v.sync_root, v.async_root, step);
  }
}

}  // namespace
