// Sampler (runtime/generate/sampler.h). Forward only, under NoGradGuard; logits of the last position are
// copied to the host as floats and the choice is made there in double precision.
#include "runtime/generate/sampler.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>

#include "runtime/io/checkpoint_dir.h"
#include "runtime/common/json_io.h"
#include "runtime/generate/generation.h"
#include "runtime/setup/model_registry.h"
#include "runtime/io/safetensors_index.h"
#include "runtime/parallel/state_io.h"
#include "runtime/plan/memory_check.h"
#include "tensor/autograd.h"
#include "tensor/error.h"

namespace st::runtime {
namespace fs = std::filesystem;
namespace {

// Refuses before building a model whose f32 weights alone exceed what this machine has available
// (the ranks of a generate job on one machine hold parts that add up to the whole model): a config
// asking for 10⁹ layers would otherwise allocate layer after layer until the OOM killer ends it.
void check_fits(const nlohmann::json& entry, const std::string& dir) {
  const ModelFactory& f = model_factory(entry.value("family", std::string()));
  if (!f.param_count) return;
  const double params = f.param_count(entry.at("config")), need = 4 * params;
  const AvailableMemory a = available_memory(Device::cpu);
  ST_CHECK(need <= a.bytes, OutOfMemoryError,
           "checkpoint " << dir << ": the model does not fit: " << params << " parameters need " << human_bytes(need)
                         << " of f32 weights on this machine, " << human_bytes(a.bytes) << " available (" << a.source
                         << ")");
}

}  // namespace

std::shared_ptr<LanguageModel> load_model_for_sampling(const std::string& dir_in, std::string* resolved,
                                                       const ModelBuild& build, std::string* note, bool allow_unchecked) {
  ST_CHECK(fs::is_directory(dir_in), IOError, "checkpoint " << dir_in << " is not a directory");
  std::string dir = dir_in;
  if (!SafetensorsStore::exists(dir, "model")) {  // a --checkpoint-dir: its newest complete step
    const CheckpointDir::ResumePoint p = CheckpointDir(dir).resume_point();
    ST_CHECK(!p.path.empty(), IOError,
             "checkpoint " << dir << " holds neither model weights (model.safetensors or its index) nor a complete step_* checkpoint"
                           << (p.note.empty() ? "" : " (" + p.note + ")"));
    if (note) *note = p.note;
    dir = p.path;
  }
  std::shared_ptr<LanguageModel> model;
  if (fs::exists(fs::path(dir) / "state.json")) {  // ours: checked as a resume checks it
    const nlohmann::json state = read_state(dir, /*require_checksum=*/!allow_unchecked);
    ST_CHECK(state.contains("model"), IOError, "checkpoint " << dir << "/state.json has no \"model\" entry");
    if (state.at("model").contains("config")) check_config_json(dir, state.at("model").at("config"));
    check_fits(state.at("model"), dir);
    model = build_model_from_json(state.at("model"), build);
    const SafetensorsStore weights(dir, "model");
    check_files_record(state.value("files", nlohmann::json()), weights, "model", allow_unchecked);
    load_parts(model_part_source(*model, weights), model->named_parameters(), /*strict=*/model->holds_all());  // a stage: its names only
  } else {
    std::string cfg = (fs::path(dir) / "config.json").string();
    ST_CHECK(fs::exists(cfg), IOError, "checkpoint " << dir << " has model weights but neither state.json nor config.json");
    const nlohmann::json config = read_json_file(cfg);
    const std::string family = family_of_hf_config(config, cfg);  // a Hugging Face directory: its model_type's family
    const nlohmann::json entry = {{"family", family}, {"config", config}};
    check_fits(entry, dir);
    model = build_model_from_json(entry, build);
    model_factory(family).load_pretrained(*model, dir);
  }
  check_finite(model->named_parameters(), "checkpoint " + dir);  // files without checksums too
  model->eval();
  if (resolved) *resolved = dir;
  return model;
}

int64_t pick_token(const std::vector<float>& logits, double temperature, int64_t top_k, std::mt19937_64& rng) {
  return choose_token(logits, temperature, top_k, 1.0, rng);
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

}  // namespace st::runtime
