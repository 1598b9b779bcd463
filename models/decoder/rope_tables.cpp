// A model's rotary tables (see the header).
#include "models/decoder/rope_tables.h"

#include <algorithm>

#include "tensor/error.h"

namespace st::models {

ops::RopeConfig rope_config(const DecoderSpec& s) {
  ops::RopeConfig c;
  c.theta = s.rope.theta;
  c.head_dim = s.head_dim;
  c.llama3 = s.rope.type == "llama3";
  c.scaling.factor = s.rope.factor;
  c.scaling.low_freq_factor = s.rope.low_freq_factor;
  c.scaling.high_freq_factor = s.rope.high_freq_factor;
  c.scaling.original_max_position_embeddings = s.rope.original_max_position;
  return c;
}

RopeTables::RopeTables(const DecoderSpec& s) : config_(rope_config(s)), context_(s.context) {
  ST_CHECK(s.position == PositionKind::rotary, ValueError, s.family << ": rotary tables for a model without rope");
}

const ops::RopeTable* RopeTables::covering(int64_t positions) {
  ST_CHECK(positions >= 1 && positions <= context_, ShapeError,
           "rotary embedding: position " << positions - 1 << " is beyond the model's context of " << context_);
  std::lock_guard<std::mutex> lock(mu_);
  if (!tables_.empty() && tables_.back()->positions() >= positions) return tables_.back().get();
  int64_t p = 256;
  while (p < positions) p *= 2;
  tables_.push_back(std::make_unique<ops::RopeTable>(config_, std::min(p, context_)));
  return tables_.back().get();
}

}  // namespace st::models
