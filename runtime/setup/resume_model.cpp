// The model flags of a resumed run against its checkpoint (see the header).
#include "runtime/setup/resume_model.h"

#include "runtime/io/checkpoint_dir.h"
#include "runtime/setup/model_registry.h"

namespace st::runtime {
namespace {

// The model fields of `cfg` set to `m`'s, --init-from cleared (the config comes from the fields).
TrainConfig with_model(TrainConfig cfg, const ModelOptions& m) {
  cfg.layers = m.layers;
  cfg.d_model = m.d_model;
  cfg.heads = m.heads;
  cfg.kv_heads = m.kv_heads;
  cfg.ffn = m.ffn;
  cfg.rope_theta = m.rope_theta;
  cfg.tie_embeddings = m.tie_embeddings;
  cfg.vocab = m.vocab;
  cfg.seq_len = m.seq_len;
  cfg.dropout = m.dropout;
  cfg.init_from.clear();
  return cfg;
}

}  // namespace

void take_model_from_checkpoint(TrainConfig& cfg, const std::function<bool(const std::string&)>& given,
                                const OptionFail& fail) {
  if (!cfg.resume || cfg.checkpoint_dir.empty()) return;
  const CheckpointDir::ResumePoint point = CheckpointDir(cfg.checkpoint_dir).resume_point();
  if (point.path.empty()) return;  // nothing to resume: a fresh start (the run says so)
  const nlohmann::json state = read_state(point.path, /*require_checksum=*/!cfg.allow_unchecked);
  ST_CHECK(state.contains("model") && state.at("model").is_object() && state.at("model").contains("family") &&
               state.at("model").contains("config"),
           IOError, point.path << "/state.json: no model entry {\"family\", \"config\"}");
  const std::string family = state.at("model").at("family").get<std::string>();
  const nlohmann::json& config = state.at("model").at("config");
  const std::string against = " contradicts the checkpoint " + point.path;
  if (given("model") && cfg.model != family) fail("model", cfg.model + against + " (model " + family + ")");
  cfg.model = family;
  const ModelFactory& f = model_factory(family);
  if (!f.options_of) return;
  const ModelOptions ck = f.options_of(config);  // the flags that build the checkpoint's config
  // a differing flag contradicts when it changes the family's config (--heads does not for the mlp)
  const nlohmann::json base = f.config_from_options(with_model(cfg, ck));
  auto reconcile = [&](const char* flag, auto ModelOptions::*field) {
    if (!given(flag)) {
      cfg.*field = ck.*field;
      return;
    }
    if (cfg.*field == ck.*field) return;
    ModelOptions probe = ck;
    probe.*field = cfg.*field;
    if (f.config_from_options(with_model(cfg, probe)) != base)
      fail(flag, option_str(static_cast<double>(cfg.*field)) + against + " (" + flag + " " +
                     option_str(static_cast<double>(ck.*field)) + ")");
  };
  reconcile("layers", &ModelOptions::layers);
  reconcile("d-model", &ModelOptions::d_model);
  reconcile("heads", &ModelOptions::heads);
  reconcile("kv-heads", &ModelOptions::kv_heads);
  reconcile("ffn", &ModelOptions::ffn);
  reconcile("rope-theta", &ModelOptions::rope_theta);
  reconcile("tie-embeddings", &ModelOptions::tie_embeddings);
  reconcile("vocab", &ModelOptions::vocab);
  reconcile("dropout", &ModelOptions::dropout);
  // --seq-len: the run's T, which the checkpoint's data position counts in
  const int64_t trained = state.contains("data") ? state.at("data").value("seq_len", int64_t{0}) : 0;
  if (trained <= 0) return;
  const int64_t asked = cfg.seq_len > 0 ? cfg.seq_len : ck.seq_len;  // 0: the context length
  if (given("seq-len") && asked != trained)
    fail("seq-len", std::to_string(cfg.seq_len) + against + " (trained at seq-len " + std::to_string(trained) + ")");
  cfg.seq_len = trained;
}

}  // namespace st::runtime
