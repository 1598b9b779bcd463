// The first hour of a new user, on the built binary (one process): nothing silent, every error
// says the fix. Each test is an item of the issue; each fails on the code before it:
//   checkpoint folders   --resume with a step folder resumes that step and writes into its run's
//                        root; an older step, a missing step, a mistyped dir, the run's folder and
//                        a step folder without --resume are refused with the way on, writing nothing;
//                        --init-from and generate take a run's root (its newest step) or a step
//   metrics              a new run refuses a --metrics file holding another run's steps (was: cut
//                        to its own lines), --overwrite-checkpoints 1 starts it anew and says so
//   the context          generate stopping at the model's context says so, per prompt; --tp 2
//                        without mpirun names the launch line
//   plan                 the parameter count (= train's model line), bytes by kind, train lines;
//                        --gpu-memory plans CUDA in bf16; nothing fits: one line naming the fix;
//                        --world 0 and --top -1 refused
//   layout errors        --pp 2 without mpirun names the launch line; --tp 3 over 4 heads lists the
//                        valid tp; a GPT-2 token file at vocab 256 names --vocab 50304
//   no effect            --zero 1, --grad-comm-dtype at dp 1, --tf32 1 on the CPU, a warm-up as
//                        long as the run: a note each
//   GPT-2 ids            config.json's bos/eos are 50256 at vocab 50304; generation_config.json
// Cost: 30 runs of the binary (a 1-block GPT, C 32, T 16, a few steps): ~2 s of CPU, ~20 s of wall
// time on 2 shared cores (each process's MPI start, ~0.7 s, is most of it).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "runtime/data/token_data.h"
#include "runtime/observe/metrics.h"

namespace fs = std::filesystem;

namespace {
struct Result {
  int code;           // exit status, -1 on a signal
  std::string out;    // stdout and stderr together
  std::string error;  // the last "shardtrain: error: " line without its prefix, "" if none
  int error_lines = 0;
};
// Runs the binary in `dir` (a scratch folder, so relative paths are the user's).
Result run(const std::string& dir, const std::string& args) {
  // ess_singleton_isolated: a process without mpirun starts no orted (half of its ~1.4 s start)
  const std::string cmd = "cd '" + dir + "' && SHARDTRAIN_PROGRESS=0 OMPI_MCA_ess_singleton_isolated=1 '" +
                          std::string(ST_SHARDTRAIN_BIN) + "' " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, "", "", 0};
  Result r{};
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  const std::string tag = "shardtrain: error: ";
  for (size_t at = r.out.find(tag); at != std::string::npos; at = r.out.find(tag, at + 1)) {
    ++r.error_lines;
    r.error = r.out.substr(at + tag.size(), r.out.find('\n', at) - at - tag.size());
  }
  return r;
}
bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }
int lines_of(const std::string& file) {
  std::ifstream in(file);
  int n = 0;
  for (std::string l; std::getline(in, l);) n += !l.empty();
  return n;
}
std::string scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("st_first_hour_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}
std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}
const std::string kTiny = "train --layers 1 --d-model 32 --heads 2 --seq-len 16 --micro-batch 2 --log-every 1 ";
using Names = std::vector<std::string>;
}  // namespace

TEST(FirstHour, ResumeTakesAStepFolderAndRefusesWhatWouldOverwrite) {
  const std::string d = scratch("resume");
  const std::string ck = "runs/x/checkpoints";
  ASSERT_EQ(run(d, kTiny + "--steps 4 --checkpoint-every 2 --keep-checkpoints 0 --checkpoint-dir " + ck).code, 0);
  // the step folder: resumed, and the run goes on in its root (was: "no checkpoint ... starting
  // fresh", step 1 again, and step_00000006/ written inside the old checkpoint)
  Result r = run(d, kTiny + "--steps 6 --keep-checkpoints 0 --resume 1 --checkpoint-dir " + ck + "/step_00000004");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "resumed from " + ck + "/step_00000004 at step 4\n")) << r.out;
  EXPECT_FALSE(has(r.out, "step 1/6")) << r.out;
  EXPECT_EQ(listing(d + "/" + ck), (Names{"step_00000002", "step_00000004", "step_00000006"}));
  for (const auto& f : listing(d + "/" + ck + "/step_00000004")) EXPECT_NE(f.rfind("step_", 0), 0u) << f;
  // an older step: the run would write over the newer ones
  r = run(d, kTiny + "--steps 8 --resume 1 --checkpoint-dir " + ck + "/step_00000002");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error_lines, 1) << r.out;
  EXPECT_EQ(r.error, "--resume: " + ck + "/step_00000002 is not the newest checkpoint of " + ck +
                         " (step 6 is), and the run would write over the newer ones: resume the newest with "
                         "--checkpoint-dir " + ck + ", or copy " + ck + "/step_00000002 into a new directory and resume from there");
  r = run(d, kTiny + "--steps 8 --resume 1 --checkpoint-dir " + ck + "/step_00000009");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error, "--resume: " + ck + "/step_00000009 does not exist: " + ck +
                         " holds 3 checkpoints (newest step 6); resume the newest with --checkpoint-dir " + ck);
  // a typo: refused, naming the directory meant (was: "starting fresh", exit 0)
  r = run(d, kTiny + "--steps 8 --resume 1 --checkpoint-dir runs/x/chekpoints");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error, "--resume: --checkpoint-dir runs/x/chekpoints does not exist (did you mean runs/x/checkpoints?): "
                     "check the path, or drop --resume 1 to start a new run there");
  // the run's folder instead of its checkpoints
  r = run(d, kTiny + "--steps 8 --resume 1 --checkpoint-dir runs/x");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error, "--resume: runs/x holds no checkpoint, but " + ck +
                         " holds 3 checkpoints (newest step 6): --checkpoint-dir " + ck + " resumes it");
  // a step folder for a new run
  r = run(d, kTiny + "--steps 8 --checkpoint-dir " + ck + "/step_00000006");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(has(r.error, "step_00000006 is one checkpoint (step 6 of the run in " + ck +
                               "), not a run's checkpoint directory: continue that run with --resume 1")) << r.error;
  EXPECT_FALSE(has(r.out, "\nstep ")) << r.out;  // nothing trained ...
  EXPECT_EQ(listing(d + "/runs/x"), (Names{"checkpoints"}));  // ... or written
  EXPECT_EQ(listing(d + "/" + ck), (Names{"step_00000002", "step_00000004", "step_00000006"}));
  fs::remove_all(d);
}

TEST(FirstHour, InitFromAndGenerateTakeARootOrAStepFolder) {
  const std::string d = scratch("init");
  ASSERT_EQ(run(d, kTiny + "--steps 2 --checkpoint-every 1 --keep-checkpoints 0 --checkpoint-dir ckpt").code, 0);
  Result r = run(d, kTiny + "--steps 1 --init-from ckpt");  // was: "ckpt/config.json is missing"
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "--init-from ckpt: a run's checkpoints; its newest, ckpt/step_00000002\n")) << r.out;
  r = run(d, kTiny + "--steps 1 --init-from ckpr");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.error, "--init-from ckpr does not exist (did you mean ckpt?)");
  r = run(d, "generate --prompt x --checkpoint ckpt/step_0000001");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.error, "generate: --checkpoint ckpt/step_0000001 does not exist (did you mean ckpt/step_00000001?)");
  fs::remove_all(d);
}

TEST(FirstHour, ANewRunRefusesAnotherRunsMetrics) {
  const std::string d = scratch("metrics");
  ASSERT_EQ(run(d, kTiny + "--steps 5 --metrics m.jsonl").code, 0);
  ASSERT_EQ(lines_of(d + "/m.jsonl"), 5);
  Result r = run(d, kTiny + "--steps 3 --metrics m.jsonl --checkpoint-dir ck");  // was: m.jsonl cut to 3 lines
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error_lines, 1) << r.out;
  EXPECT_EQ(r.error, "--metrics m.jsonl already holds steps 1-5 (5 lines) of another run, which a new run would erase: "
                     "continue that run with --resume 1, give a new --metrics file, or --overwrite-checkpoints 1 to "
                     "start it anew");
  EXPECT_EQ(lines_of(d + "/m.jsonl"), 5);
  EXPECT_FALSE(fs::exists(d + "/ck"));  // nothing written
  r = run(d, kTiny + "--steps 3 --metrics m.jsonl --overwrite-checkpoints 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "--overwrite-checkpoints: --metrics m.jsonl, which holds steps 1-5 (5 lines) of another run, "
                         "is started anew\n")) << r.out;
  EXPECT_EQ(lines_of(d + "/m.jsonl"), 3);
  // --resume that finds no checkpoint starts at step 0: the file's steps go, and it says so
  fs::create_directories(d + "/empty");
  r = run(d, kTiny + "--steps 2 --metrics m.jsonl --resume 1 --checkpoint-dir empty");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "--resume: no checkpoint in empty yet; starting fresh\n--resume: --metrics m.jsonl holds steps "
                         "1-3 (3 lines) that no checkpoint kept; they go\n")) << r.out;
  EXPECT_EQ(lines_of(d + "/m.jsonl"), 2);
  fs::remove_all(d);
}

TEST(FirstHour, GenerationSaysWhenTheContextStopsIt) {
  const std::string d = scratch("context");
  ASSERT_EQ(run(d, kTiny + "--steps 1 --checkpoint-dir ck").code, 0);  // context 16 tokens
  Result r = run(d, "sample --checkpoint ck --prompt 'The ' --tokens 50");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "\nsample: stopped after 12 of the 50 new tokens asked: with its 4 prompt tokens that fills "
                         "the model's context of 16 tokens, the most it can see (longer text needs a model trained with "
                         "a longer --seq-len)\n")) << r.out;
  // a batch: only the rows the context stops (12 + 3 and 13 + 3 fit in 16; 15 + 1 fills it)
  r = run(d, "generate --checkpoint ck --prompt 123456789012 --prompt 1234567890123 --prompt 123456789012345 --tokens 3");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "generate: prompt #3 stopped after 1 of the 3 new tokens asked: with its 15 prompt tokens "
                         "that fills the model's context of 16 tokens")) << r.out;
  EXPECT_FALSE(has(r.out, "prompt #1 stopped") || has(r.out, "prompt #2 stopped")) << r.out;
  // a layout for more ranks than the job has names the line that runs it
  r = run(d, "generate --checkpoint ck --prompt ab --tp 2");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error, "generate: --tp 2 x --pp 1 needs 2 ranks, the job has 1 (started without mpirun): launch/mpirun.sh "
                     "-n 2 -- " + std::string(ST_SHARDTRAIN_BIN) + " generate --checkpoint ck --prompt ab --tp 2");
  fs::remove_all(d);
}

TEST(FirstHour, PlanPrintsTheCountTheKindsAndTheLinesThatRunIt) {
  const std::string d = scratch("plan");
  const std::string model = "--layers 2 --d-model 32 --heads 2 --seq-len 16 --micro-batch 2 ";
  // the parameter count equals train's model line
  Result t = run(d, "train " + model + "--steps 1");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(t.out, m, std::regex("model gpt: ([0-9]+) parameters"))) << t.out;
  Result r = run(d, "plan " + model);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "model gpt: " + m[1].str() + " parameters | seq-len 16 | fp32 |")) << r.out;
  EXPECT_TRUE(has(r.out, "params      grads      optim")) << r.out;  // bytes by kind
  EXPECT_TRUE(has(r.out, "\nrun it: " + std::string(ST_SHARDTRAIN_BIN) + " train --layers 2 --d-model 32 --heads 2 "
                         "--seq-len 16 --micro-batch 2\n")) << r.out;
  // --gpu-memory: CUDA's plan in bf16 unless told, the kinds of the largest rank, the lines
  r = run(d, "plan " + model + "--grad-accum 2 --gpu-memory 1GiB --world 2 --top 2");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "| bf16 |") && has(r.out, "| on cuda (--gpu-memory: --device cuda, --precision bf16 unless given)"))
      << r.out;
  EXPECT_TRUE(has(r.out, "recompute  sp grad-accum schedule    params     grads     optim       act     comm      peak"))
      << r.out;
  EXPECT_TRUE(has(r.out, "run the best 2:\n  #1  launch/mpirun.sh --gpus -n 2 -- " + std::string(ST_SHARDTRAIN_BIN) +
                         " train --layers 2 --d-model 32 --heads 2 --seq-len 16 --micro-batch 2 --dp ")) << r.out;
  EXPECT_TRUE(has(r.out, "--device cuda --precision bf16\n  #2  ")) << r.out;
  r = run(d, "plan " + model + "--precision fp16 --device cpu --gpu-memory 1GiB --world 2");
  EXPECT_TRUE(has(r.out, "| fp16 |") && has(r.out, "| on cpu\n")) << r.out;
  // --cp: plan sizes it (B·T/cp tokens a rank) and its train line carries it
  r = run(d, "plan " + model + "--cp 2");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "--cp 2")) << r.out;
  EXPECT_TRUE(has(r.out, "-n 2 ")) << r.out;
  // nothing fits: one line, the smallest plan and what fits (was: an empty table, exit 1)
  r = run(d, "plan --config " + std::string(ST_SOURCE_DIR) + "/launch/configs/gpt2-124m.yaml --gpu-memory 2GiB --world 2");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error_lines, 1) << r.out;
  EXPECT_TRUE(std::regex_search(r.error, std::regex("^no layout of 2 ranks fits in 2\\.0 GiB per cuda device .*: the "
                                                    "smallest, dp [0-9]+ (cp [0-9]+ )?tp [0-9]+ pp [0-9]+ zero [0-3] recompute 1 "
                                                    "(sp 1 )?grad-accum [0-9]+, needs [0-9.]+ GiB on its largest rank; it fits "
                                                    "with --world 4 \\(")))
      << r.error;
  EXPECT_FALSE(has(r.out, "  #   dp")) << r.out;
  r = run(d, "plan --world 0");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.error, "--world: must be >= 1, got 0");
  r = run(d, "plan --top -1 --gpu-memory 1GiB");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.error, "--top: must be >= 1, got -1");
  fs::remove_all(d);
}

TEST(FirstHour, LayoutErrorsNameTheFix) {
  const std::string d = scratch("layout");
  Result r = run(d, "train --pp 2 --layers 2 --steps 1");  // was: "process grid: dp 1 x tp 1 x pp 2 = 2 != world size 1"
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.error, "--tp 1 x --pp 2 needs a multiple of 2 ranks (dp = ranks / 2); this job has 1 (started without "
                     "mpirun): run launch/mpirun.sh -n 2 -- " + std::string(ST_SHARDTRAIN_BIN) +
                         " train --pp 2 --layers 2 --steps 1");
  r = run(d, "train --dp 2 --tp 2 --steps 1 --metrics 'my runs/m.jsonl'");  // a word that needs quotes
  EXPECT_EQ(r.error, "the layout dp 2 x tp 2 x pp 1 needs 4 ranks; this job has 1 (started without mpirun): run "
                     "launch/mpirun.sh -n 4 -- " + std::string(ST_SHARDTRAIN_BIN) +
                         " train --dp 2 --tp 2 --steps 1 --metrics 'my runs/m.jsonl'");
  r = run(d, "train --tp 3 --heads 4 --d-model 32");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.error, "--tp (from command line): heads 4 is not divisible by tp 3 (--tp can be 1, 2, 4 for 4 heads)");
  std::vector<uint16_t> ids(400, 10);
  ids[7] = 50207;  // a GPT-2 BPE id
  st::runtime::write_token_file(d + "/gpt2.bin", ids);
  r = run(d, kTiny + "--steps 1 --data gpt2.bin");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error, "gpt2.bin holds token id 50207, outside the model's vocabulary of 256 (a GPT-2 token file?): give "
                     "--vocab 50304 (GPT-2's 50257 ids padded to a multiple of 128)");
  EXPECT_EQ(run(d, kTiny + "--steps 1 --data gpt2.bin --vocab 50304").code, 0);
  fs::remove_all(d);
}

TEST(FirstHour, FlagsWithoutEffectSaySo) {
  const std::string d = scratch("notes");
  Result r = run(d, kTiny + "--steps 3 --zero 1 --grad-comm-dtype bf16 --tf32 1 --lr-schedule cosine --warmup 3");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* note :
       {"--zero 1: no effect at dp 1 (ZeRO shards over the data-parallel replicas; this run has one)\n",
        "--grad-comm-dtype bf16: no effect at dp 1 (no gradient goes between data-parallel replicas)\n",
        "--tf32 1: no effect on the CPU (TF32 is a mode of NVIDIA's tensor cores; CPU products stay exact f32)\n",
        "lr schedule: --warmup 3 covers all 3 steps, so the lr only rises, to 0.001 at the last step (the cosine decay "
        "never starts): a shorter --warmup or more --steps\n"})
    EXPECT_TRUE(has(r.out, note)) << note << " missing in " << r.out;
  // the defaults say nothing
  r = run(d, kTiny + "--steps 3 --lr-schedule cosine --warmup 2");
  EXPECT_FALSE(has(r.out, "no effect") || has(r.out, "covers all")) << r.out;
  fs::remove_all(d);
}

TEST(FirstHour, Gpt2VocabularyCheckpointsNameGpt2sEndOfText) {
  const std::string d = scratch("eos");
  ASSERT_EQ(run(d, kTiny + "--steps 1 --vocab 50304 --checkpoint-dir big").code, 0);
  ASSERT_EQ(run(d, kTiny + "--steps 1 --checkpoint-dir small").code, 0);
  for (const auto& [dir, eos] : std::vector<std::pair<std::string, int>>{{"big", 50256}, {"small", 255}}) {
    const std::string step = d + "/" + dir + "/step_00000001";
    std::ifstream cfg(step + "/config.json"), gen(step + "/generation_config.json");
    ASSERT_TRUE(cfg.good() && gen.good()) << step;
    const nlohmann::json c = nlohmann::json::parse(cfg), g = nlohmann::json::parse(gen);
    EXPECT_EQ(c["eos_token_id"], eos) << dir;  // was 50303 (vocab − 1) at 50304
    EXPECT_EQ(c["bos_token_id"], eos) << dir;
    EXPECT_EQ(g["eos_token_id"], eos) << dir;
    EXPECT_EQ(g["bos_token_id"], eos) << dir;
  }
  fs::remove_all(d);
}
