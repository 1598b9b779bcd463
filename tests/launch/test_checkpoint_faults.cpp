// The checkpoint is the truth, and every byte of it is checked (runtime/io/safetensors_checksums.h,
// runtime/io/checkpoint_dir.h, runtime/setup/resume_model.h), through the built binary:
//   - --resume takes the model from the checkpoint: the model flags not given are its values, a
//     given one that contradicts it is refused in one line naming the flag and both values (Llama's
//     --kv-heads, --ffn, --rope-theta, --tie-embeddings too);
//   - a config.json edited to another model is refused by --resume and by generate;
//   - a newest step missing a file (state.json, a tensor file) is passed over to the last complete
//     one, with one line; the run goes on from there;
//   - a checkpoint whose header was edited (offsets swapped between two tensors of one size, a
//     dtype F32 → I32, a shape, a name) or rewritten without our checksums is refused, naming the
//     file (and the tensor), and the failed resume writes nothing;
//   - generate checks what it reads: a NaN weight in a Hugging Face folder (no checksums), a
//     flipped bit in our checkpoint;
//   - a checkpoint of the older whole-tensor checksum format still resumes, and is still checked;
//   - one stripped of every checksum record is refused, not read unchecked.
// Each run is the 1-layer, 32-wide GPT on the built-in corpus (~0.2 s); the whole test ~6 s.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/common/checksum.h"
#include "runtime/common/json_io.h"
#include "runtime/io/checkpoint_dir.h"
#include "runtime/io/safetensors.h"
#include "tests/launch/cli_runner.h"

namespace fs = std::filesystem;
using st::testing::has;
using ojson = nlohmann::ordered_json;

namespace {

st::testing::CliResult run(const std::string& args) { return st::testing::run_cli(ST_SHARDTRAIN_BIN, args); }

const std::string kTiny = "train --layers 1 --d-model 32 --heads 2 --seq-len 32 --micro-batch 2 --log-every 1 ";
const std::string kGenerate = "generate --prompt ab --max-new-tokens 3 --checkpoint ";

// A fresh checkpoint directory holding step 2 of kTiny.
std::string trained(const std::string& name) {
  const std::string d = st::testing::fresh_temp_dir(name);
  const auto r = run(kTiny + "--steps 2 --checkpoint-dir '" + d + "'");
  EXPECT_EQ(r.code, 0) << r.out;
  return d;
}

// A safetensors file's header rewritten by `edit` (the data left as it is).
void edit_header(const std::string& path, const std::function<void(ojson&)>& edit) {
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string h(n, '\0');
  in.read(h.data(), static_cast<std::streamsize>(n));
  std::string data(std::istreambuf_iterator<char>(in), {});
  in.close();
  ojson header = ojson::parse(h);
  edit(header);
  h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << h << data;
}

// Flips one bit in the middle of `tensor`'s bytes in `path`.
void flip_bit(const std::string& path, const std::string& tensor) {
  const st::runtime::SafetensorsReader r(path);
  const auto* e = r.find(tensor);
  ASSERT_NE(e, nullptr) << tensor;
  const uint64_t at = fs::file_size(path) - r.data_bytes() + (e->begin + e->end) / 2;
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x04));
}

std::vector<std::string> steps_in(const std::string& d) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(d)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST(CheckpointFaults, ResumeTakesTheModelFromTheCheckpointAndRefusesFlagsThatContradictIt) {
  const std::string d = trained("resume_flags");
  const std::string resume = "train --micro-batch 2 --log-every 1 --checkpoint-dir '" + d + "' --resume 1 ";
  // no model flag: the checkpoint's 1 layer × 32 (the defaults are 2 × 64) and its seq-len 32
  auto r = run(resume + "--steps 3");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "model gpt: 21984 parameters, 1 blocks") && has(r.out, "global batch 2 × 32 tokens")) << r.out;
  const std::string step = d + "/step_00000003";
  for (const auto& [flags, line] : std::vector<std::pair<std::string, std::string>>{
           {"--d-model 128", "--d-model (from command line): 128 contradicts the checkpoint " + step + " (d-model 32)"},
           {"--layers 6", "--layers (from command line): 6 contradicts the checkpoint " + step + " (layers 1)"},
           {"--dropout 0.1", "--dropout (from command line): 0.1 contradicts the checkpoint " + step + " (dropout 0)"},
           {"--seq-len 16", "--seq-len (from command line): 16 contradicts the checkpoint " + step + " (trained at seq-len 32)"},
           {"--model mlp", "--model (from command line): mlp contradicts the checkpoint " + step + " (model gpt)"}}) {
    r = run(resume + "--steps 5 " + flags);
    EXPECT_EQ(r.code, 2) << flags << "\n" << r.out;
    EXPECT_EQ(r.error_lines, 1) << r.out;
    EXPECT_EQ(r.error, line) << r.out;
  }
  // the same values given explicitly agree
  r = run(resume + "--steps 4 --layers 1 --d-model 32 --heads 2 --vocab 256 --seq-len 32 --model gpt");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(steps_in(d), (std::vector<std::string>{"step_00000002", "step_00000003", "step_00000004"}));
  fs::remove_all(d);
}

// The flags main added with Llama (--kv-heads, --ffn, --rope-theta, --tie-embeddings) are held to
// the checkpoint as the sizes are: not given, the checkpoint's; given and different, refused.
TEST(CheckpointFaults, ResumeHoldsLlamasFlagsToTheCheckpoint) {
  const std::string d = st::testing::fresh_temp_dir("resume_llama_flags");
  const std::string llama = "train --model llama --layers 1 --d-model 32 --heads 4 --kv-heads 2 --ffn 64 --seq-len 32 "
                            "--micro-batch 2 --log-every 1 --checkpoint-dir '" + d + "' ";
  auto r = run(llama + "--steps 2");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string resume = "train --micro-batch 2 --log-every 1 --checkpoint-dir '" + d + "' --resume 1 ";
  const std::string step = d + "/step_00000002";
  for (const auto& [flags, line] : std::vector<std::pair<std::string, std::string>>{
           {"--kv-heads 4", "--kv-heads (from command line): 4 contradicts the checkpoint " + step + " (kv-heads 2)"},
           {"--ffn 96", "--ffn (from command line): 96 contradicts the checkpoint " + step + " (ffn 64)"},
           {"--tie-embeddings 1",
            "--tie-embeddings (from command line): 1 contradicts the checkpoint " + step + " (tie-embeddings 0)"},
           {"--rope-theta 500000",
            "--rope-theta (from command line): 500000 contradicts the checkpoint " + step + " (rope-theta 10000)"}}) {
    r = run(resume + "--steps 3 " + flags);
    EXPECT_EQ(r.code, 2) << flags << "\n" << r.out;
    EXPECT_EQ(r.error_lines, 1) << r.out;
    EXPECT_EQ(r.error, line) << r.out;
  }
  // no model flag: the checkpoint's llama; the same values given explicitly agree
  r = run(resume + "--steps 3");
  EXPECT_EQ(r.code, 0) << r.out;
  // the start line counts the checkpoint's blocks (its config.json says num_hidden_layers)
  EXPECT_TRUE(has(r.out, "model llama: ") && has(r.out, " parameters, 1 blocks | ")) << r.out;
  r = run(resume + "--steps 4 --model llama --kv-heads 2 --ffn 64 --rope-theta 10000 --tie-embeddings 0");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(steps_in(d), (std::vector<std::string>{"step_00000002", "step_00000003", "step_00000004"}));
  fs::remove_all(d);
}

TEST(CheckpointFaults, AnEditedConfigJsonIsRefusedByResumeAndByGenerate) {
  const std::string d = trained("config_json");
  const std::string step = d + "/step_00000002";
  nlohmann::json c = st::runtime::read_json_file(step + "/config.json");
  c["n_layer"] = 6;
  st::runtime::write_json_file(step + "/config.json", c);
  const std::string line = step + "/config.json: n_layer 6 disagrees with the checkpoint's tensors (n_layer 1, as its "
                                  "state.json records them); config.json changed after the checkpoint was written";
  auto r = run(kTiny + "--steps 4 --checkpoint-dir '" + d + "' --resume 1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error, line) << r.out;
  r = run(kGenerate + "'" + d + "'");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error, line) << r.out;
  EXPECT_EQ(steps_in(d), std::vector<std::string>{"step_00000002"});
  fs::remove_all(d);
}

TEST(CheckpointFaults, ANewestStepMissingAFileFallsBackToTheLastCompleteOne) {
  const std::string d = st::testing::fresh_temp_dir("partial");
  auto r = run(kTiny + "--steps 6 --checkpoint-every 2 --checkpoint-dir '" + d + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  fs::remove(d + "/step_00000006/state.json");        // a copy cut short
  fs::remove(d + "/step_00000004/model.safetensors");  // a shard lost
  r = run(kTiny + "--steps 8 --checkpoint-dir '" + d + "' --resume 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "--resume: " + d + ": step_00000006 (no state.json), step_00000004 (no model.safetensors (nor "
                         "its index)) are incomplete; the newest complete one is step_00000002\n"))
      << r.out;
  EXPECT_TRUE(has(r.out, "resumed from " + d + "/step_00000002 at step 2") && has(r.out, "step 3/8")) << r.out;
  // retention (--keep-checkpoints 3) counts whole checkpoints only: step 2 stays
  EXPECT_EQ(steps_in(d), (std::vector<std::string>{"step_00000002", "step_00000004", "step_00000006", "step_00000008"}));
  // generate on the directory takes the same step, and says so
  fs::remove(d + "/step_00000008/config.json");
  r = run(kGenerate + "'" + d + "'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "generate: " + d + ": step_00000008 (no config.json), step_00000006 (no state.json), "
                         "step_00000004 (no model.safetensors (nor its index)) are incomplete; the newest complete one "
                         "is step_00000002"))
      << r.out;
  fs::remove_all(d);
}

// The operator's header probes: each loaded wrong values with exit 0 before the header was
// checked. Each resume stops before training, writing nothing.
TEST(CheckpointFaults, AnEditedHeaderIsRefusedNamingTheFileAndTheTensor) {
  const std::string ln1 = "transformer.h.0.ln_1.weight", ln2 = "transformer.h.0.ln_2.weight";
  const std::string attn = "transformer.h.0.attn.c_attn.weight";
  const std::vector<std::tuple<std::string, std::function<void(ojson&)>, std::string>> edits = {
      {"offsets swapped", [&](ojson& h) { std::swap(h[ln1]["data_offsets"], h[ln2]["data_offsets"]); }, "': its header entry"},
      {"dtype F32 -> I32", [&](ojson& h) { h[attn]["dtype"] = "I32"; }, "tensor '" + attn + "': its header entry (dtype I32"},
      {"shape", [&](ojson& h) { h[attn]["shape"] = {96, 32}; }, "tensor '" + attn + "': its header entry (dtype F32, shape (96, 32)"},
      {"renamed", [&](ojson& h) {
         ojson out;
         for (auto& [k, v] : h.items()) out[k == ln1 ? ln1 + "_" : k] = v;
         h = out;
       }, "tensor '" + ln1 + "_': its header entry"},
      {"rewritten without checksums", [](ojson& h) { h["__metadata__"] = ojson{{"format", "pt"}}; },
       ": the header differs from the one state.json recorded"},
  };
  const std::string original = trained("header_original");
  for (const auto& [what, edit, want] : edits) {
    const std::string d = st::testing::fresh_temp_dir("header");
    fs::copy(original, d, fs::copy_options::recursive);
    const std::string file = d + "/step_00000002/model.safetensors";
    edit_header(file, edit);
    auto r = run(kTiny + "--steps 4 --checkpoint-dir '" + d + "' --resume 1");
    EXPECT_EQ(r.code, 1) << what << "\n" << r.out;
    EXPECT_EQ(r.error_lines, 1) << what << "\n" << r.out;
    EXPECT_TRUE(has(r.error, "safetensors " + file + ": ") && has(r.error, want)) << what << "\n" << r.error;
    EXPECT_FALSE(has(r.out, "step 3/4")) << what << "\n" << r.out;
    EXPECT_EQ(steps_in(d), std::vector<std::string>{"step_00000002"}) << what;
    r = run(kGenerate + "'" + d + "'");
    EXPECT_EQ(r.code, 1) << what << "\n" << r.out;
    EXPECT_TRUE(has(r.error, "safetensors " + file + ": ") && has(r.error, want)) << what << "\n" << r.error;
    fs::remove_all(d);
  }
  fs::remove_all(original);
}

// A checkpoint of the format before chunk checksums (each file one checksum64 per whole tensor,
// "shardtrain.checksum64"; state.json without its record of the files), made here from a new
// one as that writer wrote it: it resumes and generates, and a flipped bit in it is still refused.
TEST(CheckpointFaults, ACheckpointOfTheWholeTensorFormatStillResumes) {
  const std::string d = trained("older_format");
  const std::string step = d + "/step_00000002";
  for (const char* base : {"model", "optimizer"}) {
    const std::string file = step + "/" + base + ".safetensors";
    const st::runtime::SafetensorsFile f = st::runtime::read_safetensors(file);
    std::string sums;
    for (const auto& [name, t] : f.tensors) sums += st::runtime::checksum_hex(st::runtime::checksum64(t.data_ptr(), t.nbytes()));
    edit_header(file, [&](ojson& h) { h["__metadata__"] = ojson{{"format", "pt"}, {"shardtrain.checksum64", sums}}; });
  }
  nlohmann::json state = st::runtime::read_state(step);
  state.erase("files");
  st::runtime::write_state(step, state);
  auto r = run(kTiny + "--steps 3 --checkpoint-dir '" + d + "' --resume 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "resumed from " + step + " at step 2") && has(r.out, "step 3/3")) << r.out;
  fs::remove_all(d + "/step_00000003");
  flip_bit(step + "/model.safetensors", "transformer.wpe.weight");
  r = run(kGenerate + "'" + d + "'");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r.error, "safetensors " + step + "/model.safetensors: tensor 'transformer.wpe.weight' does not match its "
                           "checksum"))
      << r.out;
  fs::remove_all(d);
}

// A checkpoint stripped of every checksum record (issue 55: it loaded through the unchecked path
// kept for older files): the tensor files rewritten without our checksums, state.json without
// its record of them, then without its own checksum. Each stage is refused by --resume and by
// generate, naming the file; every checkpoint written since 2026-12-03 has all of them (the
// whole-tensor format above still resumes). --allow-unchecked 1 reads it as it is (as one
// written before 2026-12-03, which has none).
TEST(CheckpointFaults, ACheckpointStrippedOfItsChecksumsIsRefused) {
  const std::string d = trained("stripped");
  const std::string step = d + "/step_00000002";
  for (const char* base : {"model", "optimizer"})
    edit_header(step + "/" + base + ".safetensors", [](ojson& h) { h["__metadata__"] = ojson{{"format", "pt"}}; });
  nlohmann::json state = st::runtime::read_state(step);
  state.erase("files");
  st::runtime::write_state(step, state);
  auto r = run(kTiny + "--steps 3 --checkpoint-dir '" + d + "' --resume 1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error_lines, 1) << r.out;
  EXPECT_TRUE(has(r.error, step + "/model.safetensors: neither state.json nor the file records its checksums "
                           "(every checkpoint written since 2026-12-03 has them: they were removed, or it is older); "
                           "refused rather than read unchecked (--allow-unchecked 1 reads it as it is)"))
      << r.out;
  EXPECT_FALSE(has(r.out, "step 3/3")) << r.out;
  r = run(kGenerate + "'" + d + "'");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r.error, step + "/model.safetensors: neither state.json nor the file records its checksums")) << r.out;
  // state.json without its own checksum as well: refused at the state, before any tensor
  std::ofstream(step + "/state.json") << state.dump();
  r = run(kTiny + "--steps 3 --checkpoint-dir '" + d + "' --resume 1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.error_lines, 1) << r.out;
  EXPECT_TRUE(has(r.error, step + "/state.json: has no checksum64 (every checkpoint written since 2026-12-03")) << r.out;
  r = run(kGenerate + "'" + d + "'");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r.error, step + "/state.json: has no checksum64")) << r.out;
  EXPECT_EQ(std::vector<std::string>{"step_00000002"}, [&] {
    std::vector<std::string> s;
    for (const auto& e : fs::directory_iterator(d)) s.push_back(e.path().filename().string());
    return s;
  }());
  // read only when asked (a checkpoint written before 2026-12-03 has none of them either)
  r = run(kGenerate + "'" + d + "' --allow-unchecked 1");
  EXPECT_EQ(r.code, 0) << r.out;
  r = run(kTiny + "--steps 3 --checkpoint-dir '" + d + "' --resume 1 --allow-unchecked 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "resumed from " + step + " at step 2") && has(r.out, "step 3/3")) << r.out;
  fs::remove_all(d);
}

// generate --stop-token the model cannot produce (issue 55: 999999, or = vocab, was accepted and
// stopped nothing): refused before any text, naming the flag and the vocabulary; -2 too; the last
// id and -1 (none) run.
TEST(CheckpointFaults, GenerateRefusesAStopTokenOutsideTheVocabulary) {
  const std::string d = trained("stop_token");
  for (const std::string id : {"999999", "256"}) {
    auto r = run(kGenerate + "'" + d + "' --stop-token " + id);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(r.error_lines, 1) << r.out;
    EXPECT_TRUE(has(r.error, "generate: --stop-token " + id + " is outside the model's vocabulary of 256 (ids 0 ... 255; "
                             "-1: none)"))
        << r.out;
  }
  auto r = run(kGenerate + "'" + d + "' --stop-token -2");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(has(r.error, "generate: --stop-token must be a token id or -1 (none), got -2")) << r.out;
  for (const char* id : {"255", "-1"}) {
    r = run(kGenerate + "'" + d + "' --stop-token " + id);
    EXPECT_EQ(r.code, 0) << id << "\n" << r.out;
  }
  fs::remove_all(d);
}

TEST(CheckpointFaults, GenerateChecksWhatItReads) {
  // a Hugging Face folder (no checksums) with a NaN weight: it generated blanks, exit 0
  const std::string hf = st::testing::fresh_temp_dir("generate_nan");
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(std::string(ST_FIXTURE_DIR) + "/" + f, hf + "/" + f);
  {
    st::runtime::SafetensorsFile f = st::runtime::read_safetensors(hf + "/model.safetensors");
    f.tensors.at(3).second.flatten().narrow(0, 5, 1).fill_(NAN);
    st::runtime::save_safetensors(hf + "/model.safetensors", f.tensors, f.metadata);
    auto r = run(kGenerate + "'" + hf + "'");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_EQ(r.error, "checkpoint " + hf + ": tensor '" + f.tensors.at(3).first + "' holds inf or NaN") << r.out;
  }
  // our checkpoint with one flipped bit
  const std::string d = trained("generate_flip");
  const std::string file = d + "/step_00000002/model.safetensors";
  flip_bit(file, "transformer.h.0.mlp.c_fc.weight");
  auto r = run(kGenerate + "'" + d + "'");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r.error, "safetensors " + file + ": tensor 'transformer.h.0.mlp.c_fc.weight' does not match its checksum"))
      << r.out;
  fs::remove_all(hf);
  fs::remove_all(d);
}
