// Generation throughput against Hugging Face's generate (not a test; launch/gpu/bench_generate.sh
// runs it after tests/bench/generate_hf.py wrote the weights, the prompts and HF's tokens and
// timings). For each batch size of the reference: shardtrain with the KV cache and without
// (runtime/generate/generation.h), tokens/s = new tokens / wall seconds (prompt pass included, as
// HF's timing is; every token's logits come to the host, so the clock stops after the device), after
// one warm-up run; then whether the greedy tokens equal HF's, row by row.
//   bench_generate --model DIR --reference FILE.json [--device cpu|cuda] [--no-cache 0|1]
// Exit 1 when a row's tokens differ from HF's.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/common/json_io.h"
#include "runtime/generate/generation.h"
#include "runtime/generate/sampler.h"

using namespace st;
using namespace st::runtime;

int main(int argc, char** argv) {
  std::string model_dir, ref_path;
  Device device = Device::cpu;
  bool no_cache = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") model_dir = v;
    else if (k == "--reference") ref_path = v;
    else if (k == "--device") device = v == "cuda" ? Device::cuda : Device::cpu;
    else if (k == "--no-cache") no_cache = v != "0";
    else {
      std::cerr << "bench_generate: unknown flag " << k << "\n";
      return 2;
    }
  }
  if (model_dir.empty() || ref_path.empty()) {
    std::cerr << "usage: bench_generate --model DIR --reference FILE.json [--device cpu|cuda] [--no-cache 0|1]\n";
    return 2;
  }
  try {
    auto model = load_model_for_sampling(model_dir);
    if (device == Device::cuda) model->move_parameters(Device::cuda);
    const nlohmann::json ref = read_json_file(ref_path);
    const auto all_prompts = ref.at("prompts").get<std::vector<std::vector<int64_t>>>();
    const int64_t n = ref.at("new_tokens").get<int64_t>();
    bool same = true;
    std::printf("%-6s %-22s %12s %12s  %s\n", "batch", "run", "tokens/s", "seconds", "note");
    for (const auto& [bs, hf] : ref.at("hf").items()) {
      const size_t B = std::stoul(bs);
      std::vector<std::vector<int64_t>> prompts(all_prompts.begin(), all_prompts.begin() + B);
      auto timed = [&](bool cache) {
        GenerationOptions o;
        o.max_new_tokens = n;
        o.use_cache = cache;
        GenerationOptions warm = o;
        warm.max_new_tokens = 4;
        generate_tokens(*model, prompts, warm, device);
        GenerationResult r = generate_tokens(*model, prompts, o, device);
        return r;
      };
      GenerationResult c = timed(true);
      const double made = static_cast<double>(B * n);
      std::printf("%-6zu %-22s %12.1f %12.3f  KV cache %.1f MiB\n", B, "shardtrain cache", made / c.seconds, c.seconds,
                  c.cache_bytes / 1048576.0);
      if (no_cache) {
        GenerationResult u = timed(false);
        std::printf("%-6zu %-22s %12.1f %12.3f  %s\n", B, "shardtrain no cache", made / u.seconds, u.seconds,
                    u.tokens == c.tokens ? "tokens = cache's" : "TOKENS DIFFER FROM THE CACHE'S");
        same = same && u.tokens == c.tokens;
      }
      const double hs = hf.at("seconds").get<double>();
      std::printf("%-6zu %-22s %12.1f %12.3f  transformers %s\n", B, "HF generate (cache)", made / hs, hs,
                  ref.value("transformers", "?").c_str());
      const auto want = hf.at("tokens").get<std::vector<std::vector<int64_t>>>();
      size_t equal = 0;
      for (size_t r = 0; r < B; ++r) equal += c.tokens[r] == want[r];
      std::printf("%-6zu greedy tokens identical to HF's: %zu of %zu rows\n", B, equal, B);
      same = same && equal == B;
    }
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "bench_generate: error: " << e.what() << "\n";
    return 1;
  }
}
