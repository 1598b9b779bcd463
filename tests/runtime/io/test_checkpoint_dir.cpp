// Checkpoint directories: temporary-then-rename commit, listing ignores incomplete ones,
// newest complete, retention, stale clean-up, state.json round trip and its errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "runtime/io/checkpoint_dir.h"
#include "runtime/common/json_io.h"
#include "tensor/error.h"

using namespace st;
using namespace st::runtime;
namespace fs = std::filesystem;

namespace {
std::string fresh_root(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("st_ckpt_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  return d.string();
}
void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
}  // namespace

TEST(CheckpointDir, Names) {
  EXPECT_EQ(CheckpointDir::step_name(10), "step_00000010");
  EXPECT_EQ(CheckpointDir::step_name(123456789), "step_123456789");
  CheckpointDir c("/x/ck");
  EXPECT_EQ(c.path_for(3), "/x/ck/step_00000003");
  EXPECT_EQ(c.temp_path_for(3), "/x/ck/.tmp-step_00000003");
  EXPECT_THROW(CheckpointDir::step_name(-1), ValueError);
}

TEST(CheckpointDir, CommitListLatestKeep) {
  CheckpointDir c(fresh_root("a"));
  EXPECT_TRUE(c.complete_steps().empty());  // root does not exist yet
  EXPECT_EQ(c.latest(), "");
  for (int64_t s : {10, 20, 30, 40}) {
    std::string tmp = c.begin(s);
    EXPECT_EQ(tmp, c.temp_path_for(s));
    write_file(tmp + "/model.safetensors", "weights " + std::to_string(s));
    write_state(tmp, {{"step", s}});
    // not complete before commit
    auto steps = c.complete_steps();
    EXPECT_TRUE(std::find(steps.begin(), steps.end(), s) == steps.end());
    EXPECT_EQ(c.commit(s), c.path_for(s));
    EXPECT_FALSE(fs::exists(tmp));
  }
  EXPECT_EQ(c.complete_steps(), (std::vector<int64_t>{10, 20, 30, 40}));
  EXPECT_EQ(c.latest_step(), 40);
  EXPECT_EQ(c.latest(), c.path_for(40));
  EXPECT_EQ(read_state(c.latest())["step"].get<int64_t>(), 40);
  EXPECT_EQ(read_file(c.path_for(20) + "/model.safetensors"), "weights 20");

  EXPECT_EQ(c.keep_last(2), (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(c.complete_steps(), (std::vector<int64_t>{30, 40}));
  EXPECT_FALSE(fs::exists(c.path_for(10)));
  EXPECT_TRUE(c.keep_last(0).empty());  // 0 keeps all
  EXPECT_TRUE(c.keep_last(5).empty());
  EXPECT_EQ(c.complete_steps().size(), 2u);
}

TEST(CheckpointDir, StaleTemporariesAreIgnoredAndCleaned) {
  CheckpointDir c(fresh_root("b"));
  c.begin(5);
  c.commit(5);
  std::string tmp = c.begin(7);  // a crash during step 7's write
  write_file(tmp + "/model.safetensors", "half");
  fs::create_directories(fs::path(c.root()) / "unrelated");
  write_file(c.root() + "/step_00000009", "a file, not a checkpoint dir");
  EXPECT_EQ(c.complete_steps(), (std::vector<int64_t>{5}));
  EXPECT_EQ(c.latest(), c.path_for(5));
  ASSERT_EQ(c.stale().size(), 1u);
  EXPECT_EQ(c.stale()[0], tmp);
  c.remove_stale();
  EXPECT_TRUE(c.stale().empty());
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_TRUE(fs::exists(c.path_for(5)));
  // begin() on a leftover temporary starts it empty
  std::string t2 = c.begin(8);
  write_file(t2 + "/junk", "x");
  t2 = c.begin(8);
  EXPECT_TRUE(fs::is_empty(t2));
  EXPECT_THROW(c.commit(99), IOError);  // never begun
}

TEST(CheckpointDir, RecommitSameStepReplaces) {
  CheckpointDir c(fresh_root("c"));
  write_file(c.begin(3) + "/f", "one");
  c.commit(3);
  write_file(c.begin(3) + "/f", "two");
  c.commit(3);
  EXPECT_EQ(read_file(c.path_for(3) + "/f"), "two");
  EXPECT_EQ(c.complete_steps(), (std::vector<int64_t>{3}));
  EXPECT_TRUE(c.stale().empty());
}

TEST(JsonIO, RoundTripAndErrors) {
  std::string root = fresh_root("d");
  fs::create_directories(root);
  nlohmann::json j = {{"step", 12}, {"rng", {{"seed", 18446744073709551615ull}, {"offset", 99}}}, {"loss_scale", 65536.0}};
  write_json_file(root + "/state.json", j);
  EXPECT_EQ(read_json_file(root + "/state.json"), j);
  EXPECT_EQ(read_json_file(root + "/state.json")["rng"]["seed"].get<uint64_t>(), 18446744073709551615ull);
  write_file(root + "/bad.json", "{\"step\": ");
  try {
    read_json_file(root + "/bad.json");
    FAIL();
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find(root + "/bad.json"), std::string::npos);
  }
  EXPECT_THROW(read_json_file(root + "/none.json"), IOError);
  EXPECT_THROW(read_state(root + "/nowhere"), IOError);
}

// state.json carries the checksum of its content: a changed digit is an IOError naming the file;
// the state reads back without the key; a state.json written by hand (no key) reads as it is.
TEST(CheckpointDir, StateJsonChecksum) {
  std::string root = fresh_root("state_sum");
  fs::create_directories(root);
  const nlohmann::json state = {{"step", 12}, {"loss_scale", 65536.0}, {"data", {{"position", 4096}}}};
  write_state(root, state);
  EXPECT_EQ(read_state(root), state);
  std::string text = read_file(root + "/state.json");
  ASSERT_NE(text.find("4096"), std::string::npos);
  write_file(root + "/state.json", text.replace(text.find("4096"), 4, "4097"));  // still valid JSON
  try {
    read_state(root);
    FAIL() << "a changed state.json was read";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find(root + "/state.json: does not match its checksum"), std::string::npos)
        << e.what();
  }
  write_file(root + "/state.json", R"({"step": 3})");
  EXPECT_EQ(read_state(root), (nlohmann::json{{"step", 3}}));
  EXPECT_THROW(write_state(root, {{"checksum64", "x"}}), IOError);
}
