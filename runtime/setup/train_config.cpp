// The run config's validation: its parts', then the rules that join two of them (see the header).
#include "runtime/setup/train_config.h"

#include "runtime/setup/model_registry.h"

namespace st::runtime {

void TrainConfig::validate(const OptionFail& fail) const {
  ModelOptions::validate(fail);
  ParallelOptions::validate(fail);
  const std::vector<std::string> known = registered_models();
  const std::string family = model_family(*this);
  if (std::find(known.begin(), known.end(), family) == known.end()) {
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    fail("model", "unknown family " + family + " (registered: " + list + ")");
  }
  const ModelFactory& f = model_factory(family);
  if (tp > 1 && !f.tensor_parallel) fail("tp", "the " + family + " model has no tensor-parallel form; use --tp 1");
  if (cp > 1 && !f.context_parallel) fail("cp", "the " + family + " model has no context-parallel form; use --cp 1");
  if (f.check_options) f.check_options(*this, fail);
  if (sequence_parallel == 1 && tp > 1) {
    // a family without a tensor-parallel form failed on --tp above; the decoder families have both
    if (seq_len > 0 && seq_len % tp != 0)
      fail("sequence-parallel", "--seq-len " + std::to_string(seq_len) + " must divide by --tp " + std::to_string(tp));
    if (dropout > 0)
      fail("sequence-parallel", "runs without dropout (masks are drawn per whole sequence): --dropout " +
                                    option_str(dropout) + " must be 0");
  }
  require_positive(fail, "pp", static_cast<double>(pp));
  if (cp > 1) validate_context_parallel(fail);
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

// --cp N > 1: the sequence divides into 2·cp chunks; what is not wired with it is refused here,
// before a rank builds anything (one line naming --cp and the other flag).
void TrainConfig::validate_context_parallel(const OptionFail& fail) const {
  if (seq_len > 0 && seq_len % (2 * cp) != 0)
    fail("cp", "--seq-len " + std::to_string(seq_len) + " must divide by 2 x --cp = " + std::to_string(2 * cp) +
                   " (each cp rank holds two chunks of seq-len / (2 x cp) tokens)");
  auto refuse = [&](const std::string& other, const std::string& why) {
    fail("cp", "--cp " + std::to_string(cp) + " with " + other + " is not supported (" + why + ")");
  };
  if (sequence_parallel == 1 && tp > 1)
    refuse("--sequence-parallel 1", "its shards are cut from the whole sequence");
  if (dropout > 0)
    refuse("--dropout " + option_str(dropout), "masks are drawn per whole sequence: use --dropout 0");
  if (precision == Precision::fp8) refuse("--precision fp8", "per-tensor scales would see one rank's chunks");
}

}  // namespace st::runtime
