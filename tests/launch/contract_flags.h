// docs/design.md's CLI contract, written out independently of launch/config.cpp's table, so a flag
// that the table loses or renames fails the tests.
#pragma once
#include <string>
#include <vector>

inline const std::vector<std::string>& contract_train_flags() {
  static const std::vector<std::string> f = {
      // docs/design.md
      "model", "layers", "d-model", "heads", "vocab", "seq-len", "init-from", "dp", "tp", "pp", "schedule",
      "virtual-stages", "partition", "comm", "micro-batch", "grad-accum", "precision", "device", "seed", "recompute", "zero",
      "optimizer", "lr", "weight-decay", "beta1", "beta2", "eps", "clip", "lr-schedule", "warmup", "steps", "data",
      "val-data", "eval-every", "checkpoint-dir", "checkpoint-every", "resume", "metrics", "trace", "timeout-s",
      // extensions
      "grad-comm-dtype", "bucket-mb", "keep-checkpoints", "momentum", "log-every", "dropout", "shuffle",
      "overwrite-checkpoints", "max-nonfinite-steps", "max-memory", "tf32", "cuda-graph", "chunked-head",
      "flight-recorder-dump", "max-loss-ratio", "loss-ratio-steps", "async-checkpoint", "sequence-parallel",
      "fp8-scaling", "fp8-amax-history", "cp", "save-on-signal"};
  return f;
}
inline const std::vector<std::string>& contract_sample_flags() {
  static const std::vector<std::string> f = {"checkpoint", "prompt", "tokens", "temperature", "top-k"};
  return f;
}
inline const std::vector<std::string>& contract_generate_flags() {
  static const std::vector<std::string> f = {"checkpoint", "init-from", "prompt", "prompts", "max-new-tokens", "tokens",
                                             "temperature", "top-k", "top-p", "stop-token", "seed", "tokenizer",
                                             "vocab", "cache", "tp", "pp", "micro-batches", "ids-out", "device"};
  return f;
}
inline const std::vector<std::string>& contract_prepare_flags() {
  static const std::vector<std::string> f = {"text", "out", "tokenizer"};
  return f;
}
