// Sampler (runtime/train/sampler.h). Forward only, under NoGradGuard; logits of the last position are
// copied to the host as floats and the choice is made there in double precision.
#include "ops/cpu/elementary.h"  // exp with the same bits on every CPU (docs/testing.md)
#include "runtime/train/sampler.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>

#include "runtime/io/checkpoint_dir.h"
#include "runtime/common/json_io.h"
#include "runtime/train/model_registry.h"
#include "runtime/io/safetensors_index.h"
#include "runtime/parallel/state_io.h"
#include "tensor/autograd.h"
#include "tensor/error.h"

namespace st::runtime {
namespace fs = std::filesystem;

std::shared_ptr<LanguageModel> load_model_for_sampling(const std::string& dir_in, std::string* resolved) {
  ST_CHECK(fs::is_directory(dir_in), IOError, "sample: " << dir_in << " is not a directory");
  std::string dir = dir_in;
  if (!SafetensorsStore::exists(dir, "model")) {
    std::string latest = CheckpointDir(dir).latest();
    ST_CHECK(!latest.empty(), IOError,
             "sample: " << dir << " holds neither model weights (model.safetensors or its index) nor a complete step_* checkpoint");
    dir = latest;
  }
  std::shared_ptr<LanguageModel> model;
  if (fs::exists(fs::path(dir) / "state.json")) {
    nlohmann::json state = read_json_file((fs::path(dir) / "state.json").string());
    ST_CHECK(state.contains("model"), IOError, "sample: " << dir << "/state.json has no \"model\" entry");
    model = build_model_from_json(state.at("model"));
    const SafetensorsStore weights(dir, "model");
    load_parts(model_part_source(*model, weights), model->named_parameters(), /*strict=*/true);
  } else {
    std::string cfg = (fs::path(dir) / "config.json").string();
    ST_CHECK(fs::exists(cfg), IOError, "sample: " << dir << " has model weights but neither state.json nor config.json");
    model = build_model_from_json({{"family", "gpt"}, {"config", read_json_file(cfg)}});  // a Hugging Face GPT-2 directory
    model_factory("gpt").load_pretrained(*model, dir);
  }
  model->eval();
  if (resolved) *resolved = dir;
  return model;
}

int64_t pick_token(const std::vector<float>& logits, double temperature, int64_t top_k, std::mt19937_64& rng) {
  const int64_t V = static_cast<int64_t>(logits.size());
  ST_CHECK(V > 0, ValueError, "sample: empty logits");
  if (temperature <= 0) return std::max_element(logits.begin(), logits.end()) - logits.begin();
  std::vector<int64_t> idx(V);
  for (int64_t i = 0; i < V; ++i) idx[i] = i;
  int64_t k = (top_k > 0 && top_k < V) ? top_k : V;
  // The k largest, ties by lower index (stable, so the draw is reproducible across platforms).
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  idx.resize(k);
  std::vector<double> p(k);
  const double mx = logits[idx[0]];
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += p[i] = ops::cpu::exp_f32(static_cast<float>((logits[idx[i]] - mx) / temperature));
  double u = std::uniform_real_distribution<double>(0.0, sum)(rng);
  for (int64_t i = 0; i < k; ++i) {
    if (u < p[i]) return idx[i];
    u -= p[i];
  }
  return idx[k - 1];
}

std::vector<int64_t> generate(LanguageModel& model, const std::vector<int64_t>& prompt, int64_t n,
                              double temperature, int64_t top_k, uint64_t seed, Device device) {
  ST_CHECK(!prompt.empty(), ValueError, "sample: the prompt needs at least one token");
  NoGradGuard no_grad;
  std::mt19937_64 rng(seed);
  std::vector<int64_t> seq = prompt, out;
  const int64_t ctx = model.context_length();
  for (int64_t i = 0; i < n; ++i) {
    int64_t T = std::min<int64_t>(ctx, static_cast<int64_t>(seq.size()));
    std::vector<int64_t> window(seq.end() - T, seq.end());
    Tensor ids = Tensor::from_vector(window, {1, T});
    if (device == Device::cuda) ids = ids.to(Device::cuda);
    Tensor logits = model.forward(ids);  // (1, T, V)
    std::vector<float> last = logits.narrow(1, T - 1, 1).to_float();  // (V)
    int64_t tok = pick_token(last, temperature, top_k, rng);
    seq.push_back(tok);
    out.push_back(tok);
  }
  return out;
}

int run_sample(const SampleConfig& cfg) {
  std::string from;
  auto model = load_model_for_sampling(cfg.checkpoint, &from);
  const Device device = cfg.device;
  if (device == Device::cuda) model->move_parameters(Device::cuda);
  std::vector<int64_t> prompt;
  for (unsigned char c : cfg.prompt) prompt.push_back(c);
  if (prompt.empty()) prompt.push_back('\n');  // an empty prompt starts from a new line
  for (int64_t t : prompt)
    ST_CHECK(t < model->vocab_size(), ValueError,
             "sample: prompt byte " << t << " is outside the model's vocabulary of " << model->vocab_size());
  std::vector<int64_t> gen = generate(*model, prompt, cfg.tokens, cfg.temperature, cfg.top_k, cfg.seed, device);
  std::string text = cfg.prompt;
  for (int64_t t : gen) {
    if (t < 256) {
      text += static_cast<char>(t);
    } else {  // not a byte: shown as <id>
      text += '<';
      text += std::to_string(t);
      text += '>';
    }
  }
  std::cerr << "sample: " << from << " (" << model->family() << ", " << model->num_parameters() << " parameters), "
            << gen.size() << " tokens, temperature " << cfg.temperature << ", top-k " << cfg.top_k << ", seed " << cfg.seed
            << "\n";
  std::cout << text << std::endl;
  return 0;
}

}  // namespace st::runtime
