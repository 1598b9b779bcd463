// The rotary tables of one model (ops/rope.h), shared by its blocks and sized to what a call
// needs: covering(P) returns a table of at least P positions, built on first need with the
// positions rounded up to a power of two (≥ 256, ≤ the model's context), so a run at T 1024 never
// builds the 131072-position table of Llama 3's context. A table once built is kept: autograd nodes
// and KV-cache steps point at it until the model is destroyed (a larger table is added beside it).
// Entries do not depend on the table's size (each is a function of its position and frequency),
// so every size gives the same bits.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "models/decoder/decoder_spec.h"
#include "ops/rope.h"

namespace st::models {

class RopeTables {
 public:
  explicit RopeTables(const DecoderSpec& s);  // s.position == rotary
  // a table of ≥ positions entries (ShapeError beyond the model's context)
  const ops::RopeTable* covering(int64_t positions);
  const ops::RopeConfig& config() const { return config_; }

 private:
  ops::RopeConfig config_;
  int64_t context_;
  std::mutex mu_;
  std::vector<std::unique_ptr<ops::RopeTable>> tables_;  // ascending sizes; the last the largest
};

// the ops' rotary settings of a description
ops::RopeConfig rope_config(const DecoderSpec& s);

}  // namespace st::models
