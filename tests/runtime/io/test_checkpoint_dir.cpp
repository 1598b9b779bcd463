// Checkpoint directories: temporary-then-rename commit (and the writers' join_temp), listing
// ignores incomplete ones, newest complete, retention, stale clean-up, state.json round trip and
// its errors; step directories missing a file passed over by the resume point; config.json held
// to state.json.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

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
    // the files a whole checkpoint holds (CheckpointDir::incomplete): keep_last counts only those
    write_file(tmp + "/optimizer.safetensors", "state " + std::to_string(s));
    write_file(tmp + "/config.json", "{}");
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

// join_temp (the asynchronous save's writers, each rank's): makes ROOT and the directory when
// missing, and a second call — another rank's writer — keeps what the first wrote there.
TEST(CheckpointDir, JoinTempMakesTheDirectoryOnceAndKeepsItsFiles) {
  CheckpointDir c(fresh_root("join") + "/nested");
  const std::string tmp = c.join_temp(4);
  EXPECT_EQ(tmp, c.temp_path_for(4));
  ASSERT_TRUE(fs::is_directory(tmp));
  write_file(tmp + "/model-00001-of-00002.safetensors", "rank 0's");
  EXPECT_EQ(c.join_temp(4), tmp);
  EXPECT_EQ(read_file(tmp + "/model-00001-of-00002.safetensors"), "rank 0's");
  write_file(tmp + "/f", "x");
  EXPECT_EQ(c.commit(4), c.path_for(4));  // commit takes it as begin()'s
  EXPECT_EQ(read_file(c.path_for(4) + "/model-00001-of-00002.safetensors"), "rank 0's");
  write_file(c.root() + "/blocker", "a file where the directory would go");
  EXPECT_THROW(CheckpointDir(c.root() + "/blocker").join_temp(5), IOError);
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

// A step directory that lacks a file is incomplete (a copy cut short, a file deleted): the resume
// point passes over it to the newest complete step, in one line naming what is missing; one
// whose files are there is complete whatever they hold (the readers judge that).
TEST(CheckpointDir, IncompleteStepsArePassedOverToTheNewestCompleteOne) {
  CheckpointDir c(fresh_root("partial"));
  auto write_step = [&](int64_t s, const std::vector<std::string>& files, const nlohmann::json& record) {
    const std::string tmp = c.begin(s);
    for (const auto& f : files) write_file(tmp + "/" + f, "x");
    nlohmann::json state = {{"step", s}};
    if (!record.is_null()) state["files"] = record;
    write_state(tmp, state);
    c.commit(s);
  };
  const std::vector<std::string> one = {"config.json", "model.safetensors", "optimizer.safetensors"};
  write_step(2, one, nlohmann::json());
  write_step(4, one, {{"model.safetensors", "0123456789abcdef"}, {"optimizer.safetensors", "0123456789abcdef"}});
  EXPECT_EQ(c.incomplete(2), "");
  EXPECT_EQ(c.incomplete(4), "");
  EXPECT_EQ(c.resume_point().path, c.path_for(4));
  EXPECT_EQ(c.resume_point().note, "");
  // sharded: the index names two files, one is gone
  write_step(6, {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors", "optimizer.safetensors"},
             nlohmann::json());
  write_file(c.path_for(6) + "/model.safetensors.index.json",
             R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})");
  EXPECT_EQ(c.incomplete(6), "model-00002-of-00002.safetensors is missing");
  // state.json's record names a file that is gone
  write_step(8, one, {{"model.safetensors", "0123456789abcdef"}, {"optimizer-00002-of-00002.safetensors", "0"}});
  EXPECT_EQ(c.incomplete(8), "optimizer-00002-of-00002.safetensors is missing");
  write_step(10, one, nlohmann::json());
  fs::remove(c.path_for(10) + "/state.json");
  EXPECT_EQ(c.incomplete(10), "no state.json");
  CheckpointDir::ResumePoint p = c.resume_point();
  EXPECT_EQ(p.path, c.path_for(4));
  EXPECT_EQ(p.step, 4);
  EXPECT_EQ(p.note, c.root() + ": step_00000010 (no state.json), step_00000008 (optimizer-00002-of-00002.safetensors "
                               "is missing), step_00000006 (model-00002-of-00002.safetensors is missing) are incomplete; "
                               "the newest complete one is step_00000004");
  // a file that is there but wrong is not "incomplete": the reader's error stops the run instead
  write_file(c.path_for(4) + "/state.json", "{ not json");
  EXPECT_EQ(c.incomplete(4), "");
  for (int64_t s : {2, 4}) fs::remove(c.path_for(s) + "/config.json");
  p = c.resume_point();
  EXPECT_EQ(p.path, "");
  EXPECT_TRUE(p.note.find("no complete checkpoint is left") != std::string::npos) << p.note;
}

// config.json is what Hugging Face reads; it must say what state.json's model config says.
TEST(CheckpointDir, ConfigJsonMustAgreeWithTheCheckpointsModel) {
  std::string root = fresh_root("config");
  fs::create_directories(root);
  const nlohmann::json config = {{"n_layer", 2}, {"n_embd", 64}, {"layer_norm_epsilon", 1e-5}};
  nlohmann::json hf = config;
  hf["transformers_version"] = "4.40.0";  // transformers' own keys are not ours to judge
  write_json_file(root + "/config.json", hf);
  EXPECT_NO_THROW(check_config_json(root, config));
  hf["n_layer"] = 6;
  write_json_file(root + "/config.json", hf);
  try {
    check_config_json(root, config);
    FAIL() << "an edited config.json was accepted";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()), root + "/config.json: n_layer 6 disagrees with the checkpoint's tensors (n_layer 2, "
                                            "as its state.json records them); config.json changed after the checkpoint "
                                            "was written");
  }
  hf.erase("n_layer");
  write_json_file(root + "/config.json", hf);
  EXPECT_THROW(check_config_json(root, config), ValueError);
  fs::remove(root + "/config.json");
  EXPECT_THROW(check_config_json(root, config), IOError);
}
