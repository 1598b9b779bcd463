// Model registry: a function-local map (safe whatever the order of static initialisation).
#include "runtime/train/model_registry.h"

#include <map>
#include <sstream>

namespace st::runtime {
namespace {

std::map<std::string, ModelFactory>& registry() {
  static std::map<std::string, ModelFactory> r;
  return r;
}

}  // namespace

void register_model(const std::string& family, ModelFactory factory) { registry()[family] = std::move(factory); }

std::vector<std::string> registered_models() {
  std::vector<std::string> out;
  for (auto& [n, f] : registry()) out.push_back(n);
  return out;
}

const ModelFactory& model_factory(const std::string& family) {
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

namespace {
const ModelFactory& tp_factory(const std::string& family) {
  const ModelFactory& f = model_factory(family);
  ST_CHECK(f.from_config_tp && f.from_json_tp, ValueError,
           "--tp > 1: the " << family << " model has no tensor-parallel variant (the gpt has)");
  return f;
}
}  // namespace

std::shared_ptr<LanguageModel> build_model(const TrainConfig& cfg, Generator& gen,
                                           std::shared_ptr<comm::Communicator> tp) {
  std::string family = cfg.model;
  if (!cfg.init_from.empty() && family != "gpt")
    ST_THROW(ValueError, "--init-from loads a GPT-2 (Hugging Face) directory; --model " << family
                                                                                       << " cannot be initialised from it");
  if (tp && tp->size() > 1) return tp_factory(family).from_config_tp(cfg, gen, tp);
  return model_factory(family).from_config(cfg, gen);
}

std::shared_ptr<LanguageModel> build_model_from_json(const nlohmann::json& entry,
                                                     std::shared_ptr<comm::Communicator> tp) {
  ST_CHECK(entry.is_object() && entry.contains("family") && entry.contains("config"), ValueError,
           "model entry needs \"family\" and \"config\", got " << entry.dump());
  const std::string family = entry.at("family").get<std::string>();
  if (tp && tp->size() > 1) return tp_factory(family).from_json_tp(entry.at("config"), tp);
  return model_factory(family).from_json(entry.at("config"));
}

}  // namespace st::runtime
