// Model registry: a function-local map (safe whatever the order of static initialisation).
#include "runtime/setup/model_registry.h"

#include <map>
#include <sstream>

#include "tensor/memory_category.h"


namespace st::runtime {
namespace {

std::map<std::string, ModelFactory>& registry() {
  static std::map<std::string, ModelFactory> r;
  return r;
}

std::string family_of(const nlohmann::json& entry) {
  ST_CHECK(entry.is_object() && entry.contains("family") && entry.contains("config") && entry.at("family").is_string(),
           ValueError, "model entry needs \"family\" and \"config\", got " << entry.dump());
  return entry.at("family").get<std::string>();
}

std::string default_family() {
  for (auto& [n, f] : registry())
    if (f.is_default) return n;
  return "";
}

}  // namespace

void register_model(const std::string& family, ModelFactory factory) { registry()[family] = std::move(factory); }

std::vector<std::string> registered_models() {
  std::vector<std::string> out;
  for (auto& [n, f] : registry()) out.push_back(n);
  return out;
}

std::string model_family(const ModelOptions& m) { return m.model.empty() ? default_family() : m.model; }

std::string family_of_hf_config(const nlohmann::json& config, const std::string& where) {
  const std::string type = config.is_object() && config.contains("model_type") && config.at("model_type").is_string()
                               ? config.at("model_type").get<std::string>()
                               : std::string();
  std::string known;
  for (auto& [n, f] : registry()) {
    if (f.hf_model_type.empty()) continue;
    if (f.hf_model_type == type) return n;
    known += (known.empty() ? "" : ", ") + ("\"" + f.hf_model_type + "\"");
  }
  ST_THROW(ValueError, where << ": model_type \"" << type << "\" is not supported (supported: " << known << ")");
}

const ModelFactory& model_factory(const std::string& name) {
  const std::string family = name.empty() ? default_family() : name;
  auto it = registry().find(family);
  if (it == registry().end()) {
    std::ostringstream known;
    for (auto& n : registered_models()) known << (known.tellp() ? ", " : "") << n;
    ST_THROW(ValueError, "unknown model '" << family << "' (registered: "
                                           << (known.str().empty() ? "none — models/ is not linked" : known.str())
                                           << ")");
  }
  return it->second;
}

std::string layer_noun(const std::string& family) {
  auto it = registry().find(family);
  return it == registry().end() ? ModelFactory{}.layer_noun : it->second.layer_noun;
}

nlohmann::json model_entry(const TrainConfig& cfg) {
  const std::string family = model_family(cfg);
  const ModelFactory& f = model_factory(family);
  ST_CHECK(cfg.init_from.empty() || !f.hf_model_type.empty(), ValueError,
           "--init-from loads a Hugging Face directory; --model " << family << " cannot be initialised from one");
  return {{"family", family}, {"config", f.config_from_options(cfg)}};
}

ModelDescription describe_model(const nlohmann::json& entry, int64_t seq_len) {
  return model_factory(family_of(entry)).describe(entry.at("config"), seq_len);
}

std::shared_ptr<LanguageModel> build_model_from_json(const nlohmann::json& entry, const ModelBuild& build) {
  const std::string family = family_of(entry);
  const ModelFactory& f = model_factory(family);
  ST_CHECK(!build.tp || build.tp->size() == 1 || f.tensor_parallel, ValueError,
           "--tp > 1: the " << family << " model has no tensor-parallel form");
  const ModelForm& form = build.form;
  ST_CHECK(!form.sequence_parallel || f.sequence_parallel, ValueError,
           "--sequence-parallel 1: the " << family << " model has no sequence-parallel form (the decoder families have)");
  ST_CHECK(!form.context_parallel() || f.context_parallel, ValueError,
           "--cp " << form.cp->size() << ": the " << family << " model has no context-parallel form (the decoder families have)");
  ST_CHECK(!form.fp8 || f.fp8, ValueError, "--precision fp8: the " << family << " model has no FP8 path (the decoder families have)");
  MemoryCategoryScope mem(MemoryCategory::params);
  return f.build(entry.at("config"), build);
}

uint64_t dropout_seed(uint64_t seed) { return seed ^ 0x9E3779B97F4A7C15ull; }

std::shared_ptr<LanguageModel> build_model(const TrainConfig& cfg, std::vector<LayerRange> layers,
                                           std::shared_ptr<comm::Communicator> tp, Device device, const ModelForm& form) {
  const nlohmann::json entry = model_entry(cfg);
  auto model = build_model_from_json(entry, ModelBuild{std::move(layers), tp, dropout_seed(cfg.seed), form});
  {
    MemoryCategoryScope mem(MemoryCategory::params);
    model->move_parameters(device);
  }
  if (cfg.init_from.empty()) {
    model->init_weights(cfg.seed);
  } else {
    const ModelFactory& f = model_factory(model_family(cfg));
    ST_CHECK(f.load_pretrained != nullptr, ValueError, "--init-from: the " << model_family(cfg) << " model cannot load one");
    f.load_pretrained(*model, cfg.init_from);
  }
  return model;
}

}  // namespace st::runtime
