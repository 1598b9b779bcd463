// GenerateConfig: the options of `shardtrain generate` (and its alias `sample`; docs/design.md's
// CLI contract), as plain data. launch/ fills and validates it (launch/cmd_generate.cpp) and
// runs the generation loop (runtime/generate/generation.h) with it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/common/device_names.h"

namespace st::runtime {

struct GenerateConfig {
  std::string checkpoint;            // our checkpoint dir (step_*/ or its parent: the newest) or an HF dir
  std::vector<std::string> prompts;  // --prompt (repeatable), then --prompts FILE's lines
  std::string prompts_file;
  size_t file_prompts = 0;  // the last ones of `prompts` came from prompts_file
  int64_t max_new_tokens = 64;
  double temperature = 0.0;  // 0: greedy (deterministic); `sample` defaults to 1
  int64_t top_k = 0;         // 0: the whole vocabulary
  double top_p = 1.0;        // 1: no nucleus cut
  int64_t stop_token = -1;   // −1: none
  uint64_t seed = 1;
  bool cache = true;
  std::string tokenizer = "byte";  // byte | gpt2 | a tokenizer.json or its DIR (launch/cmd_generate.cpp names them)
  bool tokenizer_given = false;    // --tokenizer was on the command line (else a model folder's tokenizer.json is used)
  std::string vocab;               // the BPE tokenizer's DIR with vocab.json + merges.txt
  int64_t tp = 1, pp = 1;
  int64_t micro_batches = 0;  // 0: one per pipeline stage (as many as rows allow)
  Device device = Device::cpu;
  std::string ids_out;  // JSON {"prompts": [[ids]], "tokens": [[ids]]}, written by world rank 0
  double timeout_s = 300.0;
  bool allow_unchecked = false;  // a checkpoint of ours without checksums read as it is (else refused)  // a collective slower than this ends every rank with one diagnosis (as train's)
};

}  // namespace st::runtime
