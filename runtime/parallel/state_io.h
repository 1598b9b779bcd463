// Reading this rank's part of named state — model weights, optimizer state — from safetensors
// stores that hold full tensors by name (a checkpoint, a Hugging Face directory; one file or HF's
// sharded index: runtime/io/safetensors_index.h). A part is what the rank holds of a tensor: the
// whole of it, or for a tensor split over a tp group the slices of its split dim that rank's
// ShardSpec names (runtime/common/shard_spec.h); only those bytes are read (positioned reads),
// one tensor at a time into the live tensor, so loading never needs a whole file, or a second
// copy of the rank's share, in memory. A ZeRO-3 rank reads a window of its part (its piece of
// the flattened part: runtime/parallel/zero3.h) the same way, one positioned read per contiguous
// run of the file.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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
// that shards to the target's and a dtype of the target's kind (check_dtype) (headers only).
// strict: and no other name.
void check_parts(const PartSource& src, const NamedTensors& targets, bool strict);
// ValueError naming the store and the key when the file's dtype is not of `target`'s kind: a
// float tensor (weights, moments) reads F32, F16, BF16 or F64, an integer one I32, I64 or U8 — so
// a header whose dtype was edited (F32 → I32) is not read as numbers of another kind.
void check_dtype(const PartSource& src, const std::string& name, DType target);
// Each of `targets` (live tensors, any dtype and device) ← its part, after check_parts.
void load_parts(const PartSource& src, const NamedTensors& targets, bool strict);

// Elements [first, first + count) of the part of `name` this rank holds (shaped `local`, read
// flattened row-major): a (count,) tensor in the file's dtype on the CPU, padding positions zero.
// Only those elements are read. ValueError as read_part.
Tensor read_part_window(const PartSource& src, const std::string& name, const Shape& local, int64_t first,
                        int64_t count);

// Pretrained weights opened for reading in parts (--init-from; a family's ModelFactory opens its
// directory so: runtime/setup/model_registry.h). `same_as`: (parameter name, store name) pairs
// whose parts must be equal (GPT-2's lm_head.weight and transformer.wte.weight: heads tied).
struct PretrainedSource {
  std::shared_ptr<const SafetensorsStore> store;
  PartSource parts;  // over *store
  std::vector<std::pair<std::string, std::string>> same_as;
};
// load_parts(strict false) of `targets`, then each `same_as` pair checked (ValueError naming the
// store when they differ).
void load_pretrained_parts(const PretrainedSource& src, const NamedTensors& targets);
// The window of read_part_window, and each `same_as` pair checked on that window.
Tensor read_pretrained_window(const PretrainedSource& src, const std::string& name, const Shape& local, int64_t first,
                              int64_t count);

// Throws ValueError naming `where` and the first tensor (in order) holding inf/NaN; one pass,
// float tensors only (on any device): loaded weights and optimizer state are checked so.
void check_finite(const NamedTensors& tensors, const std::string& where);

}  // namespace st::runtime
