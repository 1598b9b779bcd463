// Model registry: how runtime/ (the trainer, the sampler) builds a model without depending on
// models/ (layers point down only). models/ registers one factory per family when it is linked
// (st_models is an OBJECT library, so its registration object is always part of the program);
// a program without models/ gets a clear error naming the registered families.
#pragma once
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/language_model.h"
#include "runtime/train_config.h"
#include "tensor/rng.h"

namespace st::runtime {

struct ModelFactory {
  // A fresh model from the train options (sizes, or cfg.init_from for an HF directory); random
  // initialisation draws from `gen`.
  std::function<std::shared_ptr<LanguageModel>(const TrainConfig& cfg, Generator& gen)> from_config;
  // The same model shape from a LanguageModel::config_json() (checkpoints); weights uninitialised.
  std::function<std::shared_ptr<LanguageModel>(const nlohmann::json& config)> from_json;
};

// Registers `family` ("gpt", ...); registering a name twice replaces the factory.
void register_model(const std::string& family, ModelFactory factory);
std::vector<std::string> registered_models();
// Looks `family` up; throws ValueError naming the registered families when it is unknown.
const ModelFactory& model_factory(const std::string& family);

// cfg.model's factory (the GPT's when cfg.init_from is set).
std::shared_ptr<LanguageModel> build_model(const TrainConfig& cfg, Generator& gen);
// From a checkpoint's state.json "model" object: {"family": ..., "config": config_json()}.
std::shared_ptr<LanguageModel> build_model_from_json(const nlohmann::json& model_entry);

}  // namespace st::runtime
