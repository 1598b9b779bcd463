// The run config's validation: its parts', then the rules that join two of them (see the header).
#include "runtime/setup/train_config.h"

#include "runtime/setup/model_registry.h"

namespace st::runtime {

void TrainConfig::validate(const OptionFail& fail) const {
  ModelOptions::validate(fail);
  ParallelOptions::validate(fail);
  const std::vector<std::string> known = registered_models();
  if (std::find(known.begin(), known.end(), model) == known.end()) {
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    fail("model", "unknown family " + model + " (registered: " + list + ")");
  }
  if (tp > 1) {
    if (!model_factory(model).tensor_parallel) fail("tp", "the " + model + " model has no tensor-parallel form; use --tp 1");
    if (model != "mlp" && heads % tp != 0) {
      std::string valid;  // each tp rank holds whole heads
      for (int64_t t = 1; t <= heads; ++t)
        if (heads % t == 0) valid += (valid.empty() ? "" : ", ") + std::to_string(t);
      fail("tp", "heads " + std::to_string(heads) + " is not divisible by tp " + std::to_string(tp) + " (--tp can be " +
                     valid + " for " + std::to_string(heads) + " heads)");
    }
  }
  require_positive(fail, "pp", static_cast<double>(pp));
  if (pp > layers) fail("pp", std::to_string(pp) + " stages for " + std::to_string(layers) + " layers");
  DataOptions::validate(fail);
  PipelineOptions::validate(fail, grad_accum);
  if (schedule == Schedule::interleaved && pp * virtual_stages > layers)
    fail("virtual-stages", std::to_string(virtual_stages) + " chunks per stage x pp " + std::to_string(pp) + " = " +
                               std::to_string(pp * virtual_stages) + " chunks for " + std::to_string(layers) + " layers");
  PrecisionOptions::validate(fail);
  OptimizerOptions::validate(fail);
  RunOptions::validate(fail);
  CheckpointOptions::validate(fail);
  ObserveOptions::validate(fail);
  if (zero > 0 && optimizer != OptimizerKind::adamw)
    fail("zero", "ZeRO shards AdamW state; --optimizer is " + to_string(optimizer));
}

}  // namespace st::runtime
