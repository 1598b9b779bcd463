// The built binary against the faults a campaign found silent: an inf/NaN run stops (fp32, bf16,
// fp16 at its scale floor) with the step named; a run diverging with finite numbers stops under
// --max-loss-ratio with the step, the loss and the grad norm; a checkpoint or --init-from
// directory holding NaN weights is refused, the tensor named; a model larger than the machine is
// refused at once with the estimate; a resumed run's metrics file holds each step once. Every
// failure is exit 1 with exactly one error line. (Checkpoints changed, edited or cut short:
// test_checkpoint_faults.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "runtime/io/checkpoint_dir.h"
#include "runtime/io/safetensors.h"
#include "runtime/observe/metrics.h"
#include "tests/launch/cli_runner.h"

namespace fs = std::filesystem;

namespace {
using Result = st::testing::CliResult;
using st::testing::has;
Result run(const std::string& args, const std::string& env = "") { return st::testing::run_cli(ST_SHARDTRAIN_BIN, args, env); }
std::string temp_dir(const std::string& name) { return st::testing::fresh_temp_dir(name); }

// A small GPT on the built-in corpus: a few ms per step.
const std::string kTiny = "train --layers 1 --d-model 32 --heads 2 --seq-len 32 --micro-batch 2 --log-every 1 ";

// Rewrites `file` with element 0 of its `index`-th tensor set to NaN; returns that tensor's name.
// In a checkpoint, state.json's record of the file is rewritten too: a checkpoint written so (by
// a run that went NaN), not one changed on disk (test_checkpoint_faults.cpp).
std::string poison(const std::string& file, size_t index) {
  st::runtime::SafetensorsFile f = st::runtime::read_safetensors(file);
  auto& [name, t] = f.tensors.at(index);
  t.flatten().narrow(0, 0, 1).fill_(NAN);
  st::runtime::save_safetensors(file, f.tensors, f.metadata);
  const fs::path dir = fs::path(file).parent_path();
  if (fs::exists(dir / "state.json")) {
    nlohmann::json state = st::runtime::read_state(dir.string());
    state["files"][fs::path(file).filename().string()] =
        st::runtime::state_files_record(dir.string(), {fs::path(file).filename().string()}).begin().value();
    st::runtime::write_state(dir.string(), state);
  }
  return name;
}
}  // namespace

TEST(CliFaults, InfInFp32AndBf16StopsTheRunNamingTheStep) {
  for (const char* precision : {"fp32", "bf16"}) {
    Result r = run(kTiny + "--steps 6 --precision " + precision, "SHARDTRAIN_TEST_INF_STEP=3");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_EQ(r.error_lines, 1) << r.out;
    EXPECT_EQ(r.error, std::string("step 3: the gradients hold inf/NaN (") + precision +
                           " has no loss scaler to skip it); stopping after 1 non-finite step — see "
                           "--max-nonfinite-steps")
        << r.out;
    EXPECT_TRUE(has(r.out, "step 2/6")) << r.out;
    EXPECT_FALSE(has(r.out, "step 3/6")) << r.out;
  }
  // a limit of 3: steps 3, 4, 5 in a row stop it at 5
  Result r = run(kTiny + "--steps 8 --max-nonfinite-steps 3", "SHARDTRAIN_TEST_INF_STEP=3+");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r.error, "step 5: the gradients hold inf/NaN") && has(r.error, "(steps 3-5)")) << r.out;
  EXPECT_TRUE(has(r.out, "step 4/8") && has(r.out, "skipped (inf/nan)")) << r.out;
  // 0: never stops; the bad step is skipped and the run ends normally
  r = run(kTiny + "--steps 4 --max-nonfinite-steps 0", "SHARDTRAIN_TEST_INF_STEP=2");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "step 4/4")) << r.out;
}

// --lr 1e6 --clip 0 (the operator's probe, in one process): the loss goes from 5.28 to ~1e13 at
// step 2 and stays there, finite, with grad norms ~1e7. With --max-loss-ratio 10 steps 2, 3, 4 are
// above 10 × the mean of step 1 (5.28: the diverged steps are not folded into it), so step 4 stops
// the run; without the flag the default ratio (100) stops it at the same step (issue 55: it
// trained on to exit 0); only --max-loss-ratio 0 lets it train on. A healthy run under a tight
// ratio (1.5: its loss only falls) is not stopped. ~1 s in all.
TEST(CliFaults, ALossThatLeavesItsRunningMeanStopsTheRun) {
  const std::string diverging = kTiny + "--steps 8 --lr 1e6 --clip 0 ";
  Result r = run(diverging + "--max-loss-ratio 10");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error_lines, 1) << r.out;
  EXPECT_TRUE(has(r.error, "step 4: loss ")) << r.out;
  EXPECT_TRUE(has(r.error, " is above 10 × its running mean 5.27") && has(r.error, " for 3 steps in a row (grad norm "))
      << r.out;
  EXPECT_TRUE(has(r.error, "); the run diverged — see --max-loss-ratio")) << r.out;
  EXPECT_TRUE(has(r.out, "step 3/8") && !has(r.out, "step 4/8")) << r.out;
  // K = 1 stops at the first step above the bar
  r = run(diverging + "--max-loss-ratio 10 --loss-ratio-steps 1");
  EXPECT_TRUE(has(r.error, "step 2: loss ") && has(r.error, " for 1 step (grad norm ")) << r.out;
  r = run(diverging);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error_lines, 1) << r.out;
  EXPECT_TRUE(has(r.error, "step 4: loss ") && has(r.error, " is above 100 × its running mean 5.27")) << r.out;
  r = run(diverging + "--max-loss-ratio 0");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "step 8/8")) << r.out;
  r = run(kTiny + "--steps 20 --max-loss-ratio 1.5");
  EXPECT_EQ(r.code, 0) << r.out;
  r = run(kTiny + "--steps 2 --max-loss-ratio 1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(has(r.error, "--max-loss-ratio (from command line): must be 0 (off) or > 1, got 1")) << r.out;
}

// A Llama at --lr 1e6 (issue 55): after step 1 every unit is saturated, the grad norm is exactly 0
// and the loss sits at ln(vocab) — no ratio fires (it is below 10 × its mean), and it exited 0
// with --max-loss-ratio 10. By default three steps in a row at grad norm 0 stop it, at step 4;
// --max-zero-grad-steps 0 lets it train on.
TEST(CliFaults, ARunWhoseGradientsAreExactlyZeroStops) {
  const std::string llama = "train --model llama --layers 1 --d-model 32 --heads 2 --seq-len 32 --micro-batch 2 "
                            "--log-every 1 --steps 8 --lr 1e6 ";
  Result r = run(llama + "--max-loss-ratio 10");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error_lines, 1) << r.out;
  EXPECT_TRUE(has(r.error, "step 4: the gradient norm is exactly 0 for 3 steps in a row (loss ")) << r.out;
  EXPECT_TRUE(has(r.error, "); nothing learns any more (the run diverged into saturation, or its gradients vanished) "
                           "— see --max-zero-grad-steps"))
      << r.out;
  EXPECT_TRUE(has(r.out, "step 3/8") && !has(r.out, "step 4/8")) << r.out;
  r = run(llama + "--max-zero-grad-steps 0");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "step 8/8")) << r.out;
  r = run(llama + "--max-zero-grad-steps -1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(has(r.error, "--max-zero-grad-steps (from command line): must be >= 0, got -1")) << r.out;
}

// The data's identity is in state.json: a resume given other data (another size, or the same
// size shifted by one token) is refused in one line unless --data-changed 1, which goes on with a
// note; the same data resumes without a word; a checkpoint written before the identity was
// recorded resumes with a note.
TEST(CliFaults, AResumeWithOtherDataIsRefused) {
  const std::string d = temp_dir("data_changed");
  auto tokens = [&](const std::string& name, int n, int shift) {
    // llm.c's .bin: a 256 × int32 header (magic 20240520, version 1, count), then uint16 tokens
    const std::string path = d + "/" + name;
    std::vector<int32_t> header(256, 0);
    header[0] = 20240520, header[1] = 1, header[2] = n;
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(header.data()), 256 * 4);
    for (int i = 0; i < n; ++i) {
      const uint16_t t = static_cast<uint16_t>((i * 7 + shift) % 251);
      f.write(reinterpret_cast<const char*>(&t), 2);
    }
    return path;
  };
  const std::string a = tokens("a.bin", 4096, 0), shifted = tokens("shifted.bin", 4096, 1), shorter = tokens("b.bin", 2048, 0);
  const std::string ck = d + "/ck";
  Result r = run(kTiny + "--steps 2 --data " + a + " --checkpoint-dir " + ck);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const std::string& other : {shifted, shorter}) {
    r = run(kTiny + "--steps 3 --data " + other + " --checkpoint-dir " + ck + " --resume 1");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_EQ(r.error_lines, 1) << r.out;
    EXPECT_TRUE(has(r.error, "--resume: " + ck + "/step_00000002 was written reading data of 9216 bytes, sample ") &&
                has(r.error, "; --data " + other + " is " + (other == shorter ? "5120" : "9216") + " bytes, sample ") &&
                has(r.error, " (other data: pass --data-changed 1 to go on with it from step 2's position)"))
        << r.out;
    EXPECT_FALSE(has(r.out, "step 3/3")) << r.out;
  }
  r = run(kTiny + "--steps 3 --data " + shifted + " --checkpoint-dir " + ck + " --resume 1 --data-changed 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "(--data-changed 1: going on with it from step 2's position)") && has(r.out, "step 3/3")) << r.out;
  fs::remove_all(ck + "/step_00000003");
  r = run(kTiny + "--steps 3 --data " + a + " --checkpoint-dir " + ck + " --resume 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(has(r.out, "data identity") || has(r.out, "--data-changed")) << r.out;
  fs::remove_all(ck + "/step_00000003");
  // written before the identity was recorded: resumes, and says the data is not checked
  const std::string step = ck + "/step_00000002";
  nlohmann::json state = st::runtime::read_state(step);
  state["data"].erase("identity");
  st::runtime::write_state(step, state);
  r = run(kTiny + "--steps 3 --data " + shifted + " --checkpoint-dir " + ck + " --resume 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "--resume: " + step + "/state.json records no data identity (written before it was): the "
                         "data is not checked against the checkpoint's"))
      << r.out;
  fs::remove_all(d);
}

// Flags a run would otherwise ignore or misread, each refused in one line naming the flag.
TEST(CliFaults, FlagsThatWouldBeIgnoredAreRefused) {
  // a switch given a value it does not take names the flag and its values (was: "unexpected argument '2'")
  Result r = run(kTiny + "--steps 1 --async-checkpoint 2");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(has(r.error, "command line: flag --async-checkpoint: expected 0|1 (or true|false), got '2'")) << r.out;
  r = run(kTiny + "--steps 1 --async-checkpoint");  // alone, or before another flag: 1
  EXPECT_EQ(r.code, 0) << r.out;
  // llama's flags on a gpt model: refused naming the flag and the family
  for (const auto& [flag, want] : std::vector<std::pair<std::string, std::string>>{
           {"--kv-heads 1", "--kv-heads (from command line): the gpt model has no such setting (it is llama's): 1 "
                            "key/value heads would be ignored"},
           {"--ffn 64", "--ffn (from command line): the gpt model has no such setting (it is llama's): an MLP width "
                        "of 64 would be ignored"},
           {"--rope-theta 500000", "--rope-theta (from command line): the gpt model has no such setting (it is "
                                   "llama's): a rotary base of 500000 would be ignored"},
           {"--tie-embeddings 0", "--tie-embeddings (from command line): the gpt model has no such setting"}}) {
    r = run(kTiny + "--steps 1 " + flag);
    EXPECT_EQ(r.code, 2) << flag << "\n" << r.out;
    EXPECT_EQ(r.error_lines, 1) << flag << "\n" << r.out;
    EXPECT_TRUE(has(r.error, want)) << flag << "\n" << r.out;
  }
  r = run("train --model mlp --layers 1 --d-model 32 --seq-len 32 --steps 1 --kv-heads 2");
  EXPECT_TRUE(r.code == 2 && has(r.error, "--kv-heads (from command line): the mlp model has no such setting")) << r.out;
  // gpt's own values pass (what --init-from of a GPT-2 fills in)
  r = run(kTiny + "--steps 1 --kv-heads 2 --ffn 128 --tie-embeddings 1");
  EXPECT_EQ(r.code, 0) << r.out;
}

TEST(CliFaults, Fp16StopsOnlyOnceTheScaleIsAtItsFloor) {
  // 65536 halves 16 times to 1; the 17th overflow in a row cannot halve it and stops the run
  Result r = run(kTiny + "--steps 30 --precision fp16", "SHARDTRAIN_TEST_INF_STEP=1+");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error_lines, 1) << r.out;
  EXPECT_TRUE(has(r.error, "step 17: the gradients still overflow with the fp16 loss scale at its floor")) << r.out;
  EXPECT_TRUE(has(r.out, "step 16/30")) << r.out;
}

TEST(CliFaults, NanWeightsAreRefusedAtResumeAndInitFrom) {
  const std::string d = temp_dir("nan_ckpt");
  Result r = run(kTiny + "--steps 2 --checkpoint-dir '" + d + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string step = d + "/step_00000002";
  const std::string name = poison(step + "/model.safetensors", 2);
  r = run(kTiny + "--steps 4 --checkpoint-dir '" + d + "' --resume 1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error_lines, 1) << r.out;
  EXPECT_EQ(r.error, "--resume: " + step + " (model weights): tensor '" + name + "' holds inf or NaN") << r.out;
  // the same for the optimizer state (weights intact again: a fresh run over the old checkpoints)
  r = run(kTiny + "--steps 2 --checkpoint-dir '" + d + "' --overwrite-checkpoints 1");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string moment = poison(step + "/optimizer.safetensors", 3);
  r = run(kTiny + "--steps 4 --checkpoint-dir '" + d + "' --resume 1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error, "--resume: " + step + " (optimizer state): tensor '" + moment + "' holds inf or NaN")
      << r.out;
  // --init-from an HF directory with a NaN weight
  const std::string hf = temp_dir("nan_hf");
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(std::string(ST_FIXTURE_DIR) + "/" + f, hf + "/" + f);
  const std::string w = poison(hf + "/model.safetensors", 0);
  r = run("train --steps 1 --init-from '" + hf + "'");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error_lines, 1) << r.out;
  EXPECT_TRUE(has(r.error, "--init-from " + hf + ": tensor '")) << r.out;
  EXPECT_TRUE(has(r.error, "' holds inf or NaN")) << r.out;
  fs::remove_all(d);
  fs::remove_all(hf);
}

// A checkpoint whose file changed on disk (the campaign's "last 100 bytes flipped", which used to
// resume and train on to exit 0) or whose state.json changed is refused by its checksums, in
// one line naming the file.
TEST(CliFaults, AChangedCheckpointFileIsRefusedByItsChecksum) {
  const std::string d = temp_dir("flipped_ckpt");
  Result r = run(kTiny + "--steps 2 --checkpoint-dir '" + d + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string step = d + "/step_00000002";
  std::string model;
  for (const auto& e : fs::directory_iterator(step))
    if (e.path().filename().string().rfind("model", 0) == 0 && e.path().extension() == ".safetensors")
      model = e.path().string();
  ASSERT_FALSE(model.empty()) << "no model*.safetensors in " << step;
  {
    std::fstream f(model, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    const std::streamoff size = f.tellg();
    std::string tail(100, '\0');
    f.seekg(size - 100);
    f.read(tail.data(), 100);
    for (char& c : tail) c = static_cast<char>(~c);
    f.seekp(size - 100);
    f.write(tail.data(), 100);
  }
  r = run(kTiny + "--steps 4 --checkpoint-dir '" + d + "' --resume 1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error_lines, 1) << r.out;
  EXPECT_TRUE(has(r.error, "safetensors " + model + ": tensor '")) << r.error;
  EXPECT_TRUE(has(r.error, "' does not match its checksum")) << r.error;
  EXPECT_FALSE(has(r.out, "step 3/4")) << r.out;
  // state.json: one digit of the step changed, still valid JSON
  r = run(kTiny + "--steps 2 --checkpoint-dir '" + d + "' --overwrite-checkpoints 1");
  ASSERT_EQ(r.code, 0) << r.out;
  std::string text;
  {
    std::ifstream in(step + "/state.json");
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = text.find("\"step\": 2");
  ASSERT_NE(at, std::string::npos) << text;
  text[at + 8] = '1';
  std::ofstream(step + "/state.json") << text;
  r = run(kTiny + "--steps 4 --checkpoint-dir '" + d + "' --resume 1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r.error, step + "/state.json: does not match its checksum")) << r.error;
}

TEST(CliFaults, AModelLargerThanTheMachineIsRefusedAtOnce) {
  Result r = run("train --layers 1000000000");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error_lines, 1) << r.out;
  EXPECT_LT(r.seconds, 5.0) << r.out;  // was: killed by the OOM killer after ~45 s
  EXPECT_TRUE(has(r.error, "the model does not fit: 4.998e+13 parameters (gpt, layers 1000000000, d-model 64) need "
                           "at least 727.4 TiB on this rank"))
      << r.out;
  EXPECT_TRUE(has(r.error, " available (")) << r.out;
}

TEST(CliFaults, AResumedRunsMetricsHoldEachStepOnce) {
  const std::string d = temp_dir("metrics");
  const std::string m = d + "/metrics.jsonl", ck = d + "/ckpt";
  Result r = run(kTiny + "--steps 6 --checkpoint-every 4 --checkpoint-dir '" + ck + "' --metrics '" + m + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  // as if the run had crashed after step 6's line, before its checkpoint, mid-way through a line
  fs::remove_all(ck + "/step_00000006");
  std::ofstream(m, std::ios::app) << "{\"step\": 7, \"loss\": 5.4";
  r = run(kTiny + "--steps 8 --checkpoint-every 4 --checkpoint-dir '" + ck + "' --metrics '" + m + "' --resume 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "at step 4")) << r.out;
  std::vector<nlohmann::json> lines = st::runtime::read_metrics(m);
  ASSERT_EQ(lines.size(), 8u);
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i]["step"], static_cast<int64_t>(i + 1));
  fs::remove_all(d);
}
