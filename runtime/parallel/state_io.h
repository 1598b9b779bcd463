// Reading this rank's part of named state — model weights, optimizer state — from safetensors
// stores that hold full tensors by name (a checkpoint, a Hugging Face directory; one file or HF's
// sharded index: runtime/io/safetensors_index.h). A part is what the rank holds of a tensor: the
// whole of it, or for a tensor split over a tp group the slices of its split dim that rank's
// ShardSpec names (runtime/common/shard_spec.h); only those bytes are read (positioned reads),
// one tensor at a time into the live tensor, so loading never needs a whole file, or a second
// copy of the rank's share, in memory.
#pragma once
#include <functional>
#include <string>

#include "runtime/common/named_tensors.h"
#include "runtime/common/shard_spec.h"
#include "runtime/io/safetensors_index.h"
#include "runtime/nn/language_model.h"

namespace st::runtime {

struct PartSource {
  const SafetensorsStore* store = nullptr;
  ShardRule rule;  // null: every tensor whole
  int tp = 1, rank = 0;
  // our name → the store's (null: the same name)
  std::function<std::string(const std::string&)> file_name;
  std::string in_store(const std::string& name) const { return file_name ? file_name(name) : name; }
};

// The model's rule and tp group over `store`.
PartSource model_part_source(const LanguageModel& model, const SafetensorsStore& store);

// The part of `name` this rank holds, shaped `local`, in the file's dtype on the CPU. ValueError
// naming the tensor when the store lacks it or its full shape does not shard to `local`.
Tensor read_part(const PartSource& src, const std::string& name, const Shape& local);

// ValueError naming the key unless the store holds every one of `targets` with a full shape
// that shards to the target's (headers only). strict: and no other name.
void check_parts(const PartSource& src, const NamedTensors& targets, bool strict);
// Each of `targets` (live tensors, any dtype and device) ← its part, after check_parts.
void load_parts(const PartSource& src, const NamedTensors& targets, bool strict);

}  // namespace st::runtime
