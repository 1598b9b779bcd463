// Model registry: how runtime/ (the trainer, the sampler) builds a model without depending on
// models/ (layers point down only). models/ registers one factory per family when it is linked
// (st_models is an OBJECT library, so its registration object is always part of the program);
// a program without models/ gets a clear error naming the registered families.
//
// A model is made in three steps that never need the whole model in memory: its config (the
// family's config_json(): from the train options, an --init-from directory or a checkpoint),
// its description (every layer's names, full shapes and costs, from the config alone — what a
// pipeline partition is cut from), and the build of a range of its layers (one stage), whose
// parameters are then filled by init_weights(seed) (keyed by name) or read from files.
#pragma once
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/common/shard_spec.h"
#include "runtime/nn/language_model.h"
#include "runtime/nn/model_form.h"
#include "runtime/parallel/state_io.h"
#include "runtime/setup/train_config.h"

namespace st::runtime {

// What to build of a model, and in which form (a model is built from its plan, never configured
// after: runtime/nn/model_form.h).
struct ModelBuild {
  std::vector<LayerRange> layers;               // the ranges this rank holds (empty: all)
  std::shared_ptr<comm::Communicator> tp;       // a group of > 1 ranks: the tensor-parallel variant
  uint64_t dropout_seed = 0;                    // seed of the model's dropout generator
  ModelForm form = {};                          // sequence / context parallel, FP8, the chunked head
};

// A family's factory, filled by name (designated initializers: models/register.cpp); a member left
// empty means the family does not offer it.
struct ModelFactory {
  // The family's config_json() for these train options: sizes from the flags (and --dropout);
  // with cfg.init_from, that directory's config.json.
  std::function<nlohmann::json(const TrainConfig& cfg)> config_from_options;
  // The full model's layers from a config, at sequence length seq_len; builds nothing.
  std::function<ModelDescription(const nlohmann::json& config, int64_t seq_len)> describe;
  // The layers asked for, on the CPU, parameters zero (LayerNorm weights one): fill them with
  // init_weights(seed) or a checkpoint.
  std::function<std::shared_ptr<LanguageModel>(const nlohmann::json& config, const ModelBuild& build)> build;
  // Reads this model's part of pretrained weights from a directory (--init-from); null: none.
  std::function<void(LanguageModel& model, const std::string& dir)> load_pretrained = {};
  bool tensor_parallel = false;  // build() accepts a tp group of > 1 ranks
  // The forms build() accepts (ModelForm): a cp group of > 1 ranks (--cp), sequence parallelism,
  // FP8 GEMMs. build_model_from_json refuses the others, naming the flag and the family.
  bool context_parallel = false;
  bool sequence_parallel = false;
  bool fp8 = false;
  // The number of parameters build() would make of the whole model, in closed form from the
  // config, without building or describing it (for the memory check, runtime/plan/memory_check.h);
  // a double, as absurd sizes overflow int64. Null: the family does not say.
  std::function<double(const nlohmann::json& config)> param_count = {};
  // The tensor-parallel split of each parameter (as the tp build makes it), for the memory
  // planner (runtime/plan/memory_plan.h); null: every parameter whole on every rank.
  std::function<ShardRule(const nlohmann::json& config)> shard_rule = {};
  // The pretrained directory opened for reading this model's parts in pieces, headers checked and
  // nothing read (what a ZeRO-3 rank draws its pieces from: runtime/parallel/zero3.h); null: the
  // family cannot (ZeRO-3 with --init-from is then refused).
  std::function<PretrainedSource(const LanguageModel& model, const std::string& dir)> open_pretrained = {};
  // The Hugging Face model_type of the config.json this family reads (--init-from, generate on a
  // save_pretrained directory), as models/register.cpp gives it; "": none.
  std::string hf_model_type = {};
  // The family a run gets when --model is not given (exactly one family says so).
  bool is_default = false;
  // What the start-up line calls the model's depth() units ("model gpt: N parameters, 12 blocks").
  std::string layer_noun = "blocks";
  // The family's own checks of the options (heads dividing the width, no dropout where it has
  // none, ...): fail(flag, why) for the first bad one. Null: none.
  std::function<void(const TrainConfig& cfg, const OptionFail& fail)> check_options = {};
  // The sizes a Hugging Face config.json of this family gives (layers, d_model, heads, vocab,
  // seq_len = its context, and the family's own: kv_heads, ffn, ...), for the CLI to check flags
  // against --init-from's. Null: the family has none.
  std::function<ModelOptions(const nlohmann::json& config)> options_of_hf = {};
  // The model flags that make `config` (config_from_options' inverse: sizes, the context length as
  // seq_len, dropout; a flag the family has no use for left at its default) — what a resumed run
  // holds its flags to (runtime/setup/resume_model.h). Null: the flags are not checked.
  std::function<ModelOptions(const nlohmann::json& config)> options_of = {};
};

// Registers `family`; registering a name twice replaces the factory. models/ registers every
// family: runtime/ names none.
void register_model(const std::string& family, ModelFactory factory);
std::vector<std::string> registered_models();
// Looks `family` up ("" is the default family); throws ValueError naming the registered families
// when it is unknown.
const ModelFactory& model_factory(const std::string& family);
// What the start-up line calls the depth() units of a model of `family`: its factory's
// layer_noun, the default ("blocks") for a model built outside the registry.
std::string layer_noun(const std::string& family);
// The family of the options: --model, or the default family when it is empty.
std::string model_family(const ModelOptions& m);
// The family whose hf_model_type is a config.json's model_type; ValueError naming `where`, the
// type and the supported ones otherwise.
std::string family_of_hf_config(const nlohmann::json& config, const std::string& where);

// {"family", "config"} of the model the train options ask for (cfg.model; the GPT of
// cfg.init_from when set, ValueError for another --model).
nlohmann::json model_entry(const TrainConfig& cfg);
// The description of a {"family", "config"} entry.
ModelDescription describe_model(const nlohmann::json& entry, int64_t seq_len);
// Builds `build.layers` of the model of `entry`, unfilled (see ModelFactory::build); ValueError
// for a tp group of > 1 ranks or a form (build.form) the family has no variant for.
std::shared_ptr<LanguageModel> build_model_from_json(const nlohmann::json& entry, const ModelBuild& build = {});
// Builds the model the options ask for, in `form`, and fills it: from cfg.init_from
// (load_pretrained), else init_weights(cfg.seed). Its dropout seed derives from cfg.seed. On `device`.
std::shared_ptr<LanguageModel> build_model(const TrainConfig& cfg, std::vector<LayerRange> layers = {},
                                           std::shared_ptr<comm::Communicator> tp = nullptr,
                                           Device device = Device::cpu, const ModelForm& form = {});
// The dropout generator's seed of a run seeded `seed` (its own stream, not the weights').
uint64_t dropout_seed(uint64_t seed);

}  // namespace st::runtime
