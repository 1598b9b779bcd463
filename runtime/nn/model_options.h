// ModelOptions: which model a run trains and its sizes, as `shardtrain train` takes them (the
// "model" group of --help). A family turns them into its config (runtime/setup/model_registry.h);
// --init-from's config.json overrides the sizes.
#pragma once
#include <cstdint>
#include <string>

#include "runtime/common/option_check.h"

namespace st::runtime {

struct ModelOptions {
  std::string model;  // a registered family (runtime/setup/model_registry.h); "": the default family
  int64_t layers = 2;
  int64_t d_model = 64;
  int64_t heads = 4;
  int64_t kv_heads = 0;       // key/value heads (grouped-query attention); 0: the heads
  int64_t ffn = 0;            // the MLP's width; 0: the family's rule (GPT-2 4C; Llama 2/3·4C rounded up to 256)
  double rope_theta = 10000;  // rotary positions' base (families with rotary positions)
  int64_t tie_embeddings = -1;  // the head shares the token embedding: 1, 0; -1 the family's default
  int64_t vocab = 256;
  int64_t seq_len = 0;    // 0: the model's context length (n_positions for an HF init, else 64)
  std::string init_from;  // HF dir (model.safetensors + config.json); sizes then come from it
  double dropout = -1;    // every dropout layer's p; < 0: the model's own (GPT 0 / config.json's, ST 0.1)

  void validate(const OptionFail& fail) const {
    require_positive(fail, "layers", static_cast<double>(layers));
    require_positive(fail, "d-model", static_cast<double>(d_model));
    require_positive(fail, "heads", static_cast<double>(heads));
    require_positive(fail, "vocab", static_cast<double>(vocab));
    // token files hold uint16 ids (< 65536); a larger vocabulary (Llama 3's 128256) trains on the ids
    // they can hold and generates any
    if (vocab > (int64_t{1} << 24)) fail("vocab", "at most 2^24 (16777216), got " + std::to_string(vocab));
    require_non_negative(fail, "seq-len", static_cast<double>(seq_len));
    require_non_negative(fail, "kv-heads", static_cast<double>(kv_heads));
    require_non_negative(fail, "ffn", static_cast<double>(ffn));
    require_positive(fail, "rope-theta", rope_theta);
    if (tie_embeddings < -1 || tie_embeddings > 1) fail("tie-embeddings", "must be 0, 1 or -1, got " + std::to_string(tie_embeddings));
    if (dropout != -1 && !(dropout >= 0 && dropout < 1)) fail("dropout", "must be in [0, 1) or -1, got " + option_str(dropout));
    // what a family needs of them (heads dividing the width, no dropout in a model without it):
    // the family's own check (runtime/setup/model_registry.h, ModelFactory::check_options)
  }
};

}  // namespace st::runtime
