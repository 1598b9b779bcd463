// The whole binary on broken --init-from directories (the HF fixture, one fault each): every run
// must end with exit 1 (or 2 for a bad size caught by the option checks) and exactly one error
// line, never a signal, an abort, exit 0 or a hang (each run under `timeout 60`: status 124).
// `shardtrain generate --checkpoint` on the same directories: the same (a NaN weight generated
// blanks with exit 0 before generate checked what it read; a dtype edited F32 → I32 trained on
// the weights' bits read as integers before the dtype was checked against the model's).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/common/json_io.h"
#include "runtime/io/safetensors.h"
#include "tests/fuzz/fuzz_harness.h"

namespace fs = std::filesystem;

namespace st::fuzz {
namespace {

struct Outcome {
  bool signaled = false;
  int code = -1;
  int error_lines = 0;
  std::string out;
};
Outcome run_cli(const std::string& args) {
  const std::string cmd = "SHARDTRAIN_PROGRESS=0 timeout 60 '" + std::string(ST_SHARDTRAIN_BIN) + "' " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  Outcome o;
  if (!p) return o;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) o.out.append(buf.data(), n);
  const int status = ::pclose(p);
  o.signaled = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) > 128);  // a shell reports a signal as 128+n
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  for (size_t at = o.out.find("shardtrain: error: "); at != std::string::npos; at = o.out.find("shardtrain: error: ", at + 1))
    ++o.error_lines;
  return o;
}

using Fault = std::function<void(const std::string& dir)>;

void edit_config(const std::string& dir, const std::function<void(nlohmann::json&)>& f) {
  nlohmann::json j = runtime::read_json_file(dir + "/config.json");
  f(j);
  runtime::write_json_file(dir + "/config.json", j);
}
void edit_tensors(const std::string& dir, const std::function<void(runtime::SafetensorsFile&)>& f) {
  runtime::SafetensorsFile s = runtime::read_safetensors(dir + "/model.safetensors");
  f(s);
  runtime::save_safetensors(dir + "/model.safetensors", s.tensors, s.metadata);
}
void edit_bytes(const std::string& dir, const std::function<void(Bytes&)>& f) {
  Bytes b = read_file(dir + "/model.safetensors");
  f(b);
  write_file(dir + "/model.safetensors", b);
}

TEST(FuzzCli, BrokenInitFromDirectoriesEndWithOneLine) {
  const std::vector<std::pair<std::string, Fault>> faults = {
      {"weights truncated to 60%", [](const std::string& d) { edit_bytes(d, [](Bytes& b) { b.resize(b.size() * 6 / 10); }); }},
      {"header length 2^63", [](const std::string& d) { edit_bytes(d, [](Bytes& b) { b[7] = '\x80'; }); }},
      {"header bytes flipped", [](const std::string& d) { edit_bytes(d, [](Bytes& b) { b[40] ^= 0x5a; b[41] ^= 0x21; }); }},
      {"a trailing byte", [](const std::string& d) { edit_bytes(d, [](Bytes& b) { b.push_back('\0'); }); }},
      {"a weight's dtype F32 -> I32 (no checksums to catch it)",
       [](const std::string& d) { edit_bytes(d, [](Bytes& b) { b.replace(b.find("\"F32\""), 5, "\"I32\""); }); }},
      {"a weight missing", [](const std::string& d) { edit_tensors(d, [](auto& s) { s.tensors.erase(s.tensors.begin() + 3); }); }},
      {"a weight of another shape",
       [](const std::string& d) { edit_tensors(d, [](auto& s) { s.tensors[2].second = s.tensors[2].second.flatten().narrow(0, 0, 5); }); }},
      {"a NaN weight",
       [](const std::string& d) { edit_tensors(d, [](auto& s) { s.tensors[1].second.flatten().narrow(0, 0, 1).fill_(NAN); }); }},
      {"n_embd 48 against 64-wide weights", [](const std::string& d) { edit_config(d, [](auto& j) { j["n_embd"] = 48; j["n_head"] = 4; }); }},
      {"n_layer 1e9", [](const std::string& d) { edit_config(d, [](auto& j) { j["n_layer"] = 1000000000; }); }},
      {"n_head 0", [](const std::string& d) { edit_config(d, [](auto& j) { j["n_head"] = 0; }); }},
      {"vocab_size 70000", [](const std::string& d) { edit_config(d, [](auto& j) { j["vocab_size"] = 70000; }); }},
      {"n_layer as text", [](const std::string& d) { edit_config(d, [](auto& j) { j["n_layer"] = "two"; }); }},
      {"config.json not JSON", [](const std::string& d) { write_file(d + "/config.json", "{\"model_type\": \"gpt2\", "); }},
  };
  const std::string fixture = ST_FIXTURE_DIR;
  for (const auto& [what, fault] : faults) {
    const std::string dir = temp_path("cli_dir");
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fixture + "/" + f, dir + "/" + f);
    fault(dir);
    for (const std::string& args : {"train --steps 1 --init-from '" + dir + "'",
                                     "generate --max-new-tokens 2 --prompt ab --checkpoint '" + dir + "'"}) {
      const std::string cmd = args.substr(0, args.find(' '));
      const Outcome o = run_cli(args);
      EXPECT_FALSE(o.signaled) << cmd << ", " << what << ": ended on a signal\n" << o.out;
      EXPECT_TRUE(o.code == 1 || o.code == 2) << cmd << ", " << what << ": exit " << o.code << "\n" << o.out;
      EXPECT_EQ(o.error_lines, 1) << cmd << ", " << what << "\n" << o.out;
      std::cout << cmd << ", " << what << " -> exit " << o.code << ": " << o.out.substr(o.out.find("error: ") + 7);
    }
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace st::fuzz
