// Shared by the model tests: the HF fixture's paths and a TrainConfig matching
// tests/fixtures/make_hf_gpt2_tiny.py's run (lr 1e-3, betas 0.9/0.95, eps 1e-8, wd 0.1,
// clip 1.0, B 4, T 32, 5 steps, fp32, dropout off via the fixture's config).
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

#include "runtime/setup/train_config.h"

namespace st::testing {

inline std::string fixture_dir() { return ST_FIXTURE_DIR; }

inline runtime::TrainConfig reference_config() {
  runtime::TrainConfig c;
  c.model = "gpt";
  c.init_from = fixture_dir();
  c.data = fixture_dir() + "/tokens.bin";
  c.micro_batch = 4;
  c.grad_accum = 1;
  c.seq_len = 32;
  c.precision = runtime::Precision::fp32;
  c.optimizer = runtime::OptimizerKind::adamw;
  c.lr = 1e-3;
  c.weight_decay = 0.1;
  c.beta1 = 0.9;
  c.beta2 = 0.95;
  c.eps = 1e-8;
  c.clip = 1.0;
  c.lr_schedule = runtime::LrScheduleKind::constant;
  c.warmup = 0;
  c.steps = 5;
  c.log_every = 0;
  return c;
}

// A fresh empty directory under the system temp dir.
inline std::string temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("st_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

}  // namespace st::testing
