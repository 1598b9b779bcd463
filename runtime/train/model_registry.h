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

#include "comm/communicator.h"
#include "runtime/nn/language_model.h"
#include "runtime/train/train_config.h"
#include "tensor/rng.h"

namespace st::runtime {

struct ModelFactory {
  // A fresh model from the train options (sizes, or cfg.init_from for an HF directory); random
  // initialisation draws from `gen`.
  std::function<std::shared_ptr<LanguageModel>(const TrainConfig& cfg, Generator& gen)> from_config;
  // The same model shape from a LanguageModel::config_json() (checkpoints); weights uninitialised.
  std::function<std::shared_ptr<LanguageModel>(const nlohmann::json& config)> from_json;
  // Tensor-parallel variants (null: the family has none): the same model split over `tp`, equal
  // to the unsplit one from the same generator or checkpoint.
  std::function<std::shared_ptr<LanguageModel>(const TrainConfig& cfg, Generator& gen,
                                               std::shared_ptr<comm::Communicator> tp)>
      from_config_tp = {};
  std::function<std::shared_ptr<LanguageModel>(const nlohmann::json& config, std::shared_ptr<comm::Communicator> tp)>
      from_json_tp = {};
  // The number of parameters from_config would build, in closed form, without building it (for
  // the memory check, runtime/train/memory_check.h); a double, as absurd sizes overflow int64.
  // Null: the family does not say.
  std::function<double(const TrainConfig& cfg)> param_count = {};
};

// Registers `family` ("gpt", ...); registering a name twice replaces the factory.
void register_model(const std::string& family, ModelFactory factory);
std::vector<std::string> registered_models();
// Looks `family` up; throws ValueError naming the registered families when it is unknown.
const ModelFactory& model_factory(const std::string& family);

// cfg.model's factory (the GPT's when cfg.init_from is set).
// With a tp group of more than one rank: the family's tensor-parallel variant (ValueError if none).
std::shared_ptr<LanguageModel> build_model(const TrainConfig& cfg, Generator& gen,
                                           std::shared_ptr<comm::Communicator> tp = nullptr);
// From a checkpoint's state.json "model" object: {"family": ..., "config": config_json()}.
std::shared_ptr<LanguageModel> build_model_from_json(const nlohmann::json& model_entry,
                                                     std::shared_ptr<comm::Communicator> tp = nullptr);

}  // namespace st::runtime
