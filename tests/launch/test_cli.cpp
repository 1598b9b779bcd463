// The built binary: every subcommand's --help lists every flag of docs/design.md's contract, exit
// codes (0 / 1 error / 2 usage), one-line error causes naming the rank under MPI launchers,
// prepare end to end, info's build features, --version.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "contract_flags.h"
#include "runtime/data/token_data.h"

namespace fs = std::filesystem;

namespace {
struct Result {
  int code;
  std::string out;  // stdout and stderr together
};
// Runs the shardtrain binary with `args` (shell words) and optional environment assignments.
Result run(const std::string& args, const std::string& env = "") {
  std::string cmd = env + (env.empty() ? "" : " ") + "'" + std::string(ST_SHARDTRAIN_BIN) + "' " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}
bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }
int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }
}  // namespace

TEST(Cli, HelpListsEveryContractFlag) {
  Result r = run("train --help");
  EXPECT_EQ(r.code, 0);
  for (const auto& f : contract_train_flags()) EXPECT_TRUE(has(r.out, "  --" + f + " ")) << "train --help lacks --" << f;
  EXPECT_TRUE(has(r.out, "--config FILE.yaml"));
  r = run("sample --help");
  EXPECT_EQ(r.code, 0);
  for (const auto& f : contract_sample_flags()) EXPECT_TRUE(has(r.out, "  --" + f + " ")) << "sample --help lacks --" << f;
  r = run("generate --help");
  EXPECT_EQ(r.code, 0);
  for (const auto& f : contract_generate_flags())
    EXPECT_TRUE(has(r.out, "  --" + f + " ")) << "generate --help lacks --" << f;
  r = run("prepare --help");
  EXPECT_EQ(r.code, 0);
  for (const auto& f : contract_prepare_flags()) EXPECT_TRUE(has(r.out, "  --" + f + " ")) << "prepare --help lacks --" << f;
  r = run("info --help");
  EXPECT_EQ(r.code, 0);
  r = run("plan --help");  // the train flags, its own, and the cost model it ranks by
  EXPECT_EQ(r.code, 0);
  for (const char* f : {"  --layers ", "  --max-memory ", "  --gpu-memory ", "  --world ", "  --intra-gbs ", "  --inter-gbs "})
    EXPECT_TRUE(has(r.out, f)) << "plan --help lacks" << f;
  EXPECT_TRUE(has(r.out, "(1 + (pp-1)/m)")) << r.out;
  r = run("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* c : {"train", "generate", "sample", "plan", "prepare", "info"}) EXPECT_TRUE(has(r.out, c));
}

// The help texts as a new user reads them (issue 56, item 9): sample's usage names sample, a
// default is shown once, floats short, the footer counts cp, every line within 100 columns.
TEST(Cli, HelpTextsReadWell) {
  Result r = run("sample --help");
  EXPECT_EQ(r.out.rfind("usage: shardtrain sample --checkpoint DIR", 0), 0u) << r.out.substr(0, 80);
  r = run("generate --help");
  EXPECT_EQ(r.out.rfind("usage: shardtrain generate --checkpoint DIR", 0), 0u) << r.out.substr(0, 80);
  EXPECT_TRUE(has(r.out, "[default: 1]")) << "generate's --top-p default";  // not 1.000000
  EXPECT_FALSE(has(r.out, ".000000")) << "a float printed at fixed precision";
  r = run("train --help");
  EXPECT_FALSE(has(r.out, "(default: ")) << "a default written into the help text and shown again";
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\\n  --model [a-z|-]+ +model family \\[default: gpt\\]\\n"))) << r.out;
  EXPECT_TRUE(has(r.out, "Layouts: dp x cp x tp x pp = the MPI world size"));
  EXPECT_TRUE(has(r.out, "  --save-on-signal ") && has(r.out, "  --global-batch "));
  for (const char* cmd : {"train --help", "plan --help", "generate --help", "sample --help"}) {
    r = run(cmd);
    std::istringstream in(r.out);
    std::string line;
    while (std::getline(in, line)) EXPECT_LE(line.size(), 100u) << cmd << ": " << line;
  }
  r = run("plan --help");
  EXPECT_TRUE(has(r.out, "[default: 9.89e+14]")) << "plan's --flops default";
  EXPECT_FALSE(has(r.out, ".000000")) << "a float printed at fixed precision";
}

// --device cuda where no GPU is usable: one line with the reason `shardtrain info` gives (issue
// 56, item 2), exit 2, before anything is built — not CUDA's error from a first memory query.
TEST(Cli, DeviceCudaWithoutAGpuSaysWhyInOneLine) {
  const Result info = run("info");
  if (!has(info.out, "cuda available: no")) GTEST_SKIP() << "a CUDA device is usable here";
  for (const char* cmd : {"train --layers 1 --d-model 16 --heads 2 --steps 1 --device cuda",
                          "generate --checkpoint /nonexistent --prompt a --device cuda"}) {
    const Result r = run(cmd);
    EXPECT_EQ(r.code, 2) << cmd << ": " << r.out;
    EXPECT_EQ(count_lines(r.out), 1) << cmd << ": " << r.out;
    EXPECT_TRUE(has(r.out, "--device cuda: ") && has(r.out, "; --device cpu runs on the CPU")) << r.out;
    // the reason info gives
    for (const char* why : {"built without CUDA", "no NVIDIA driver: none is installed", "no usable device ("})
      EXPECT_EQ(has(info.out, why), has(r.out, why)) << cmd << ": '" << why << "' in one of: " << info.out << " / " << r.out;
    EXPECT_FALSE(has(r.out, "does not fit") || has(r.out, "cudaMemGetInfo")) << r.out;
  }
}

TEST(Cli, UsageErrorsExitTwoWithOneLine) {
  Result r = run("");
  EXPECT_EQ(r.code, 2);
  r = run("fly");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "shardtrain: error: unknown command 'fly' (commands: train, generate, sample, plan, prepare, info, version)\n");
  r = run("train --d-modle 8");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_TRUE(has(r.out, "shardtrain: error: command line: unknown flag --d-modle")) << r.out;
  // context parallelism is a training layout: generate has no --cp, one usage line says so
  r = run("generate --cp 2 --prompt hi");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_TRUE(has(r.out, "unknown flag --cp for shardtrain generate")) << r.out;
  // a --cp the other flags cannot compose with: one line naming both, before anything is built
  // (--pp composes with it: tests/runtime/train/test_layouts_cp_pp.cpp)
  r = run("train --cp 2 --precision fp8 --seq-len 16");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_TRUE(has(r.out, "--cp 2 with --precision fp8 is not supported")) << r.out;
  r = run("train --lr abc", "OMPI_COMM_WORLD_RANK=3");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(r.out.rfind("[rank 3] shardtrain: error: ", 0) == 0) << r.out;
  r = run("train --heads 5", "SLURM_PROCID=7");
  EXPECT_TRUE(r.out.rfind("[rank 7] shardtrain: error: --heads", 0) == 0) << r.out;
  // --sequence-parallel 1 refused before any rank starts: T must divide by tp, no dropout
  r = run("train --tp 2 --sequence-parallel 1 --seq-len 15");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_TRUE(has(r.out, "shardtrain: error: --sequence-parallel (from command line): --seq-len 15 must divide by --tp 2")) << r.out;
  r = run("train --tp 2 --sequence-parallel 1 --dropout 0.1");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.out, "--sequence-parallel (from command line): runs without dropout")) << r.out;
  r = run("prepare --out x.bin");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.out, "--text FILE is required")) << r.out;
  r = run("sample --checkpoint /nonexistent_ckpt");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.out, "sample: --checkpoint /nonexistent_ckpt does not exist")) << r.out;
}

TEST(Cli, RuntimeErrorsExitOne) {
  fs::path d = fs::temp_directory_path() / ("st_cli_" + std::to_string(::getpid()));
  fs::create_directories(d);
  Result r = run("prepare --text '" + (d / "missing.txt").string() + "' --out '" + (d / "o.bin").string() + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_TRUE(has(r.out, "shardtrain: error: " + (d / "missing.txt").string())) << r.out;
}

TEST(Cli, PrepareEndToEnd) {
  fs::path d = fs::temp_directory_path() / ("st_cli_" + std::to_string(::getpid()));
  fs::create_directories(d);
  const std::string text = "the quick brown fox jumps over the lazy dog\n";
  std::ofstream((d / "fox.txt").string()) << text;
  Result r = run("prepare --text '" + (d / "fox.txt").string() + "' --out '" + (d / "fox.bin").string() + "' --tokenizer byte");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, std::to_string(text.size()) + " tokens")) << r.out;
  st::runtime::TokenData td((d / "fox.bin").string());
  ASSERT_EQ(td.num_tokens(), static_cast<int64_t>(text.size()));
  for (size_t i = 0; i < text.size(); ++i) ASSERT_EQ(td.token(static_cast<int64_t>(i)), static_cast<unsigned char>(text[i]));
}

TEST(Cli, InfoReportsBuildFeatures) {
  Result r = run("info");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* line : {"CUDA: ", "NCCL: ", "cuDNN: ", "MPI: ", "devices:", "cuda available: "})
    EXPECT_TRUE(has(r.out, line)) << r.out;
  if (ST_BUILT_WITH_CUDA) {
    EXPECT_TRUE(has(r.out, "CUDA: yes")) << r.out;
    // the attention choice (docs/launch.md, "GPU settings"): deterministic unless
    // SHARDTRAIN_ATTENTION (or its older name ST_ATTENTION) says otherwise; the two must agree
    EXPECT_TRUE(has(r.out, "SHARDTRAIN_ATTENTION=deterministic: ")) << r.out;
    Result now = run("info", "SHARDTRAIN_ATTENTION=flash");
    EXPECT_TRUE(has(now.out, "SHARDTRAIN_ATTENTION=flash: own flash kernels")) << now.out;
    Result both = run("info", "SHARDTRAIN_ATTENTION=flash ST_ATTENTION=fast");
    EXPECT_NE(both.code, 0) << both.out;
    EXPECT_TRUE(has(both.out, "SHARDTRAIN_ATTENTION=flash and ST_ATTENTION=fast disagree")) << both.out;
    Result flash = run("info", "ST_ATTENTION=flash");
    EXPECT_TRUE(has(flash.out, "ST_ATTENTION=flash: own flash kernels")) << flash.out;
    Result bad = run("info", "ST_ATTENTION=fastest");
    EXPECT_TRUE(has(bad.out, "ST_ATTENTION=fastest: not one of deterministic, fast, cudnn, flash: train and generate refuse it")) << bad.out;
    // a CUDA build on a machine without the driver says so (not "driver 0.0 ... insufficient")
    if (!fs::exists("/proc/driver/nvidia/version")) {
      EXPECT_TRUE(has(r.out, "no NVIDIA driver: none is installed")) << r.out;
      EXPECT_FALSE(has(r.out, "driver 0.0")) << r.out;
    }
  } else {
    EXPECT_TRUE(has(r.out, "CUDA: no\n")) << r.out;
    EXPECT_TRUE(has(r.out, "NCCL: no\n")) << r.out;
    EXPECT_TRUE(has(r.out, "cuda available: no\n")) << r.out;
  }
}

// shardtrain --version / version: CMake's project version and the commit (git describe at
// configure time: a commit of this repository, or "unknown" without git).
TEST(Cli, VersionNamesTheProjectVersionAndCommit) {
  for (const char* cmd : {"--version", "version"}) {
    Result r = run(cmd);
    EXPECT_EQ(r.code, 0) << cmd;
    std::smatch m;
    const std::regex line("^shardtrain ([0-9.]+) \\(commit ([^ ()]+)\\)\n$");
    ASSERT_TRUE(std::regex_match(r.out, m, line)) << r.out;
    EXPECT_EQ(m[1].str(), ST_PROJECT_VERSION);
    const std::string commit = m[2].str();
    if (commit == "unknown") continue;
    std::smatch h;
    ASSERT_TRUE(std::regex_search(commit, h, std::regex("(?:^|-g)([0-9a-f]{7,40})(?:-dirty)?$"))) << commit;
    const std::string check = "git -C '" + std::string(ST_SOURCE_DIR) + "' cat-file -e " + h[1].str() + "^{commit} 2>/dev/null";
    EXPECT_EQ(std::system(check.c_str()), 0) << commit << " is not a commit of " << ST_SOURCE_DIR;
  }
}
