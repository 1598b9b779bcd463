// Option parsing: defaults < YAML file < flags (whatever the flags' position), every error names
// the key or flag and the file, values are parsed strictly, validation, --init-from resolution
// against the HF fixture, and the shipped configs (every contract flag present, all valid).
#include <gtest/gtest.h>

#include <regex>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>

#include "contract_flags.h"
#include "launch/config.h"

using namespace st;
using namespace st::launch;
using runtime::TrainConfig;
namespace fs = std::filesystem;

namespace {
std::string temp_yaml(const std::string& name, const std::string& text) {
  fs::path d = fs::temp_directory_path() / ("st_launch_cfg_" + std::to_string(::getpid()));
  fs::create_directories(d);
  std::string p = (d / name).string();
  std::ofstream(p) << text;
  return p;
}
// Expects a UsageError whose message contains every needle.
void expect_usage_error(const std::vector<std::string>& args, const std::vector<std::string>& needles) {
  try {
    parse_train_args(args);
    FAIL() << "no error";
  } catch (const UsageError& e) {
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "'" << n << "' not in: " << e.what();
  }
}
}  // namespace

TEST(LaunchConfig, DefaultsFileThenFlags) {
  std::string y = temp_yaml("order.yaml", "layers: 6\nd-model: 96\nheads: 3\nlr: 0.01\nresume: false\nprecision: bf16\n");
  // flags before --config still override the file
  TrainConfig c = parse_train_args({"--lr", "0.5", "--config", y, "--heads=6", "--micro-batch", "3", "--zero", "2", "--recompute", "0"});
  EXPECT_EQ(c.layers, 6);        // file
  EXPECT_EQ(c.d_model, 96);      // file
  EXPECT_EQ(c.heads, 6);         // flag over file
  EXPECT_DOUBLE_EQ(c.lr, 0.5);   // flag over file
  EXPECT_EQ(c.micro_batch, 3);   // flag over default
  EXPECT_EQ(runtime::to_string(c.precision), "bf16");
  EXPECT_EQ(c.zero, 2);          // a ZeRO stage
  EXPECT_FALSE(c.recompute);
  EXPECT_EQ(c.vocab, TrainConfig{}.vocab);  // default kept
  EXPECT_EQ(c.grad_accum, 1);
  // a switch followed by another flag takes no value
  TrainConfig d = parse_train_args({"--checkpoint-dir", "/tmp/x", "--resume", "--steps", "7"});
  EXPECT_TRUE(d.resume);
  EXPECT_EQ(d.steps, 7);
  // every field is reachable by its flag
  TrainConfig e = parse_train_args({"--model", "mlp", "--seq-len", "16", "--dp", "2", "--tp", "1", "--pp", "2", "--layers", "4",
                                    "--schedule", "gpipe", "--partition", "uniform", "--comm", "mpi", "--device", "cuda",
                                    "--seed", "18446744073709551615", "--grad-comm-dtype", "bf16", "--bucket-mb", "1.5",
                                    "--optimizer", "sgd", "--momentum", "0.5", "--weight-decay", "0.2", "--beta1", "0.8",
                                    "--beta2", "0.9", "--eps", "1e-6", "--clip", "0", "--lr-schedule", "cosine", "--warmup", "5",
                                    "--min-lr-ratio", "0.2", "--timeout-s", "12.5", "--log-every", "3", "--keep-checkpoints", "0",
                                    "--metrics", "m.jsonl", "--trace", "t.json", "--progress", "off"});
  EXPECT_EQ(e.model, "mlp");
  EXPECT_EQ(e.seq_len, 16);
  EXPECT_EQ(e.dp, 2);
  EXPECT_EQ(runtime::to_string(e.schedule), "gpipe");
  EXPECT_EQ(e.seed, 18446744073709551615ull);
  EXPECT_DOUBLE_EQ(e.bucket_mb, 1.5);
  EXPECT_EQ(runtime::to_string(e.optimizer), "sgd");
  EXPECT_DOUBLE_EQ(e.eps, 1e-6);
  EXPECT_DOUBLE_EQ(e.timeout_s, 12.5);
  EXPECT_EQ(e.keep_checkpoints, 0);
  EXPECT_EQ(e.metrics, "m.jsonl");
  EXPECT_FALSE(e.progress);
}

// The options of a first hour: --shuffle, --overwrite-checkpoints, validation's default interval,
// and --tp refused for the families without a tensor-parallel form (as --help says).
TEST(LaunchConfig, ShuffleOverwriteEvalIntervalAndTpFamilies) {
  TrainConfig c = parse_train_args({"--shuffle", "1", "--checkpoint-dir", "/tmp/x", "--overwrite-checkpoints"});
  EXPECT_TRUE(c.shuffle);
  EXPECT_TRUE(c.overwrite_checkpoints);
  EXPECT_FALSE(parse_train_args({}).shuffle);
  expect_usage_error({"--checkpoint-dir", "/tmp/x", "--resume", "1", "--overwrite-checkpoints", "1"},
                     {"--overwrite-checkpoints", "a resumed run continues its checkpoints"});
  for (const char* family : {"simple-transformer", "mlp"})
    expect_usage_error({"--model", family, "--tp", "2", "--heads", "2"},
                       {"--tp", "the " + std::string(family) + " model has no tensor-parallel form"});
  EXPECT_EQ(parse_train_args({"--tp", "2"}).tp, 2);  // gpt
  TrainConfig v;
  v.steps = 200;
  EXPECT_EQ(runtime::eval_interval(v), 0);  // no validation data: never
  v.val_data = "v.bin";
  EXPECT_EQ(runtime::eval_interval(v), 20);  // max(1, steps / 10)
  v.steps = 7;
  EXPECT_EQ(runtime::eval_interval(v), 1);
  v.eval_every = 3;
  EXPECT_EQ(runtime::eval_interval(v), 3);
  // the help's entries wrapped at 100 columns: a phrase is looked for with its lines joined
  const std::string help = std::regex_replace(train_usage(), std::regex("\n {38}"), " ");
  for (const char* needle : {"gpt and llama (simple-transformer and mlp have no tensor-parallel form)",
                             "0: with --val-data every max(1, steps / 10) steps", "only when stdout is a terminal (isatty)",
                             "--overwrite-checkpoints 0|1", "--shuffle 0|1"})
    EXPECT_NE(help.find(needle), std::string::npos) << needle;
}

TEST(LaunchConfig, UnknownKeysAndFlagsNameThemAndTheFile) {
  std::string y = temp_yaml("unknown.yaml", "layers: 2\nd_model: 64\n");
  expect_usage_error({"--config", y}, {"unknown key 'd_model'", y, "did you mean 'd-model'"});
  expect_usage_error({"--d-modle", "8"}, {"unknown flag --d-modle", "command line", "did you mean --d-model"});
  expect_usage_error({"--frobnicate", "8"}, {"unknown flag --frobnicate"});
  expect_usage_error({"positional"}, {"unexpected argument 'positional'"});
  expect_usage_error({"--config", "/nonexistent/cfg.yaml"}, {"/nonexistent/cfg.yaml", "cannot open"});
  expect_usage_error({"--config", temp_yaml("list.yaml", "- a\n- b\n")}, {"list.yaml", "mapping"});
  expect_usage_error({"--config", temp_yaml("nested.yaml", "lr:\n  a: 1\n")}, {"nested.yaml", "key 'lr'", "single value"});
  expect_usage_error({"--config", temp_yaml("syntax.yaml", "lr: [1, 2\n")}, {"syntax.yaml", "YAML error at line"});
  expect_usage_error({"--lr"}, {"flag --lr needs a value"});
  expect_usage_error({"--config", temp_yaml("dup.yaml", "lr: 1\nsteps: 2\nlr: 3\n")}, {"dup.yaml", "key 'lr' appears twice (line 3)"});
  expect_usage_error({"--config", temp_yaml("cplxkey.yaml", "? [a, b]\n: 1\n")}, {"cplxkey.yaml", "plain name"});
}

TEST(LaunchConfig, BadValuesNameTheKeyAndTheFile) {
  std::string y = temp_yaml("badvalue.yaml", "lr: fast\n");
  expect_usage_error({"--config", y}, {y, "key 'lr'", "expected a finite number, got 'fast'"});
  y = temp_yaml("badint.yaml", "layers: 2.5\n");
  expect_usage_error({"--config", y}, {y, "key 'layers'", "expected an integer, got '2.5'"});
  y = temp_yaml("badenum.yaml", "precision: fp4\n");
  expect_usage_error({"--config", y}, {y, "key 'precision'", "expected one of fp32|fp16|bf16|fp8, got 'fp4'"});
  expect_usage_error({"--grad-comm-dtype", "fp8"}, {"--grad-comm-dtype", "fp8 is a compute precision"});
  expect_usage_error({"--fp8-scaling", "delayed"}, {"--fp8-scaling", "it needs --precision fp8", "this run is fp32"});
  expect_usage_error({"--fp8-scaling", "late"}, {"--fp8-scaling", "expected one of current|delayed, got 'late'"});
  expect_usage_error({"--precision", "fp8", "--fp8-scaling", "delayed", "--fp8-amax-history", "0"},
                     {"--fp8-amax-history", "must be in 1 ... 4096, got 0"});
  {
    const auto c = parse_train_args({"--precision", "fp8", "--fp8-scaling", "delayed", "--fp8-amax-history", "32"});
    EXPECT_EQ(c.fp8_scaling, ops::Fp8ScaleMode::delayed);
    EXPECT_EQ(c.fp8_amax_history, 32);
    EXPECT_EQ(parse_train_args({}).fp8_scaling, ops::Fp8ScaleMode::current);  // the default: unchanged
  }
  expect_usage_error({"--micro-batch", "8x"}, {"flag --micro-batch", "expected an integer, got '8x'"});
  expect_usage_error({"--zero", "maybe"}, {"flag --zero", "expected an integer, got 'maybe'"});
  expect_usage_error({"--zero", "4"}, {"--zero", "must be 0, 1, 2 or 3", "got 4"});
  expect_usage_error({"--zero", "-1"}, {"--zero", "must be 0, 1, 2 or 3"});
  expect_usage_error({"--zero", "3", "--optimizer", "sgd"}, {"--zero", "ZeRO shards AdamW state"});
  expect_usage_error({"--recompute=2"}, {"flag --recompute", "expected 0|1"});
  expect_usage_error({"--lr", "nan"}, {"flag --lr", "finite"});
  expect_usage_error({"--seed", "-1"}, {"flag --seed", "non-negative integer"});
}

TEST(LaunchConfig, Validation) {
  std::string y = temp_yaml("heads.yaml", "d-model: 64\nheads: 5\n");
  expect_usage_error({"--config", y}, {"--heads", y, "not divisible"});
  expect_usage_error({"--micro-batch", "0"}, {"--micro-batch (from command line)", "must be positive"});
  expect_usage_error({"--layers", "-2"}, {"--layers", "must be positive"});
  expect_usage_error({"--beta2", "1"}, {"--beta2", "[0, 1)"});
  expect_usage_error({"--resume"}, {"--resume", "needs --checkpoint-dir"});
  expect_usage_error({"--vocab", "20000000"}, {"--vocab", "2^24"});
  expect_usage_error({"--tp", "3", "--heads", "4"}, {"--tp", "not divisible"});
  expect_usage_error({"--pp", "3", "--layers", "2"}, {"--pp"});
  expect_usage_error({"--data", "/nonexistent/tokens.bin"}, {"--data", "no such file"});
  expect_usage_error({"--eval-every", "5"}, {"--eval-every", "needs --val-data"});
  expect_usage_error({"--timeout-s", "0"}, {"--timeout-s", "must be positive"});
}

// The pipeline schedule's options are checked at parse time, each error naming its flag.
TEST(LaunchConfig, PipelineScheduleOptions) {
  TrainConfig c = parse_train_args({"--pp", "2", "--layers", "4", "--schedule", "interleaved", "--virtual-stages", "2",
                                    "--grad-accum", "6"});
  EXPECT_EQ(c.schedule, runtime::Schedule::interleaved);
  EXPECT_EQ(c.virtual_stages, 2);
  const std::vector<std::string> inter = {"--pp", "2", "--layers", "4", "--schedule", "interleaved"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = inter;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  expect_usage_error(with({"--grad-accum", "4"}), {"--virtual-stages", "needs 2 or more, got 1"});
  expect_usage_error(with({"--virtual-stages", "2", "--grad-accum", "3"}),
                     {"--grad-accum", "multiple of --pp 2, got 3"});
  expect_usage_error(with({"--virtual-stages", "3", "--grad-accum", "4"}), {"--virtual-stages", "6 chunks for 4 layers"});
  expect_usage_error({"--pp", "2", "--virtual-stages", "2"}, {"--virtual-stages", "--schedule 1f1b needs 1, got 2"});
  // tags: 2·m·v − 1 must stay below the shape handshake's 32767
  EXPECT_EQ(parse_train_args({"--pp", "2", "--grad-accum", "16383"}).grad_accum, 16383);
  expect_usage_error({"--pp", "2", "--grad-accum", "16384"}, {"--grad-accum", "at most 16383 micro-batches", "16384"});
  expect_usage_error(with({"--virtual-stages", "2", "--grad-accum", "8192"}),
                     {"--grad-accum", "at most 8191 micro-batches", "of 2 chunks per stage"});
  EXPECT_EQ(parse_train_args({"--grad-accum", "100000"}).grad_accum, 100000);  // no pipeline, no tags
}

TEST(LaunchConfig, InitFromTakesSizesFromConfigJson) {
  const std::string dir = ST_FIXTURE_DIR;
  TrainConfig c = parse_train_args({"--init-from", dir, "--heads", "4"});  // agreeing size flag is fine
  EXPECT_EQ(c.model, "gpt");
  EXPECT_EQ(c.layers, 2);
  EXPECT_EQ(c.d_model, 64);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.vocab, 256);
  EXPECT_EQ(c.seq_len, 32);  // n_positions
  EXPECT_EQ(parse_train_args({"--init-from", dir, "--seq-len", "16"}).seq_len, 16);
  expect_usage_error({"--init-from", dir, "--d-model", "128"}, {"--d-model", "128 conflicts with 64 in", "config.json"});
  expect_usage_error({"--init-from", dir, "--seq-len", "64"}, {"--seq-len", "exceeds the context length 32"});
  expect_usage_error({"--init-from", dir, "--model", "mlp"}, {"--model", "conflicts"});
  expect_usage_error({"--init-from", "/nonexistent_hf"}, {"--init-from /nonexistent_hf does not exist"});
}

TEST(LaunchConfig, ShippedConfigsListEveryFlagAndAreValid) {
  for (const char* name : {"demo", "gpt2-124m", "simple-transformer", "llama-tiny"}) {
    const std::string path = std::string(ST_SOURCE_DIR) + "/launch/configs/" + name + ".yaml";
    YAML::Node root = YAML::LoadFile(path);
    for (const auto& f : contract_train_flags()) EXPECT_TRUE(root[f]) << path << " lacks " << f;
    TrainConfig scratch;
    const OptionTable table = train_options(scratch);
    for (const auto& s : table.specs()) EXPECT_TRUE(root[s.name]) << path << " lacks " << s.name;
    TrainConfig c = parse_train_args({"--config", path});
    if (std::string(name) == "gpt2-124m") {
      EXPECT_EQ(c.layers, 12);
      EXPECT_EQ(c.d_model, 768);
      EXPECT_EQ(c.heads, 12);
      EXPECT_EQ(c.vocab, 50304);
      EXPECT_EQ(c.seq_len, 1024);
      EXPECT_EQ(c.micro_batch, 16);
      EXPECT_EQ(runtime::to_string(c.device), "cuda");
    } else if (std::string(name) == "simple-transformer") {
      EXPECT_EQ(c.model, "simple-transformer");
      EXPECT_EQ(c.vocab, 10000);
      EXPECT_EQ(c.d_model, 256);
      EXPECT_EQ(c.heads, 8);
      EXPECT_EQ(c.layers, 6);
    } else {
      if (std::string(name) == "llama-tiny") {
        EXPECT_EQ(c.model, "llama");
        EXPECT_EQ(c.kv_heads, 2);
        EXPECT_EQ(c.ffn, 384);
        EXPECT_EQ(c.rope_theta, 500000);
        EXPECT_EQ(c.tie_embeddings, 0);
      }
      EXPECT_EQ(c.vocab, 256);
      EXPECT_EQ(c.seq_len, 64);
      EXPECT_EQ(c.micro_batch, 8);
      EXPECT_TRUE(c.data.empty());  // the built-in corpus
    }
  }
}
