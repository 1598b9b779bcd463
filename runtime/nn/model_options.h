// ModelOptions: which model a run trains and its sizes, as `shardtrain train` takes them (the
// "model" group of --help). A family turns them into its config (runtime/setup/model_registry.h);
// --init-from's config.json overrides the sizes.
#pragma once
#include <cstdint>
#include <string>

#include "runtime/common/option_check.h"

namespace st::runtime {

struct ModelOptions {
  std::string model = "gpt";  // a registered family (runtime/setup/model_registry.h)
  int64_t layers = 2;
  int64_t d_model = 64;
  int64_t heads = 4;
  int64_t vocab = 256;
  int64_t seq_len = 0;    // 0: the model's context length (n_positions for an HF init, else 64)
  std::string init_from;  // HF dir (model.safetensors + config.json); sizes then come from it
  double dropout = -1;    // every dropout layer's p; < 0: the model's own (GPT 0 / config.json's, ST 0.1)

  void validate(const OptionFail& fail) const {
    require_positive(fail, "layers", static_cast<double>(layers));
    require_positive(fail, "d-model", static_cast<double>(d_model));
    require_positive(fail, "heads", static_cast<double>(heads));
    require_positive(fail, "vocab", static_cast<double>(vocab));
    if (vocab > 65536) fail("vocab", "token files hold uint16 ids, so at most 65536, got " + std::to_string(vocab));
    if (model != "mlp" && d_model % heads != 0)
      fail("heads", "d-model " + std::to_string(d_model) + " is not divisible by heads " + std::to_string(heads));
    require_non_negative(fail, "seq-len", static_cast<double>(seq_len));
    if (dropout != -1 && !(dropout >= 0 && dropout < 1)) fail("dropout", "must be in [0, 1) or -1, got " + option_str(dropout));
    if (model == "mlp" && dropout > 0) fail("dropout", "the mlp model has no dropout layers");
  }
};

}  // namespace st::runtime
