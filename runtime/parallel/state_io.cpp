#include "runtime/parallel/state_io.h"

#include <set>

#include "tensor/autograd.h"

namespace st::runtime {

PartSource model_part_source(const LanguageModel& model, const SafetensorsStore& store) {
  PartSource src;
  src.store = &store;
  src.rule = model.shard_rule();
  if (auto tp = model.tensor_parallel_group()) {
    src.tp = tp->size();
    src.rank = tp->rank();
  }
  return src;
}

namespace {

// What rank `src.rank` holds of the file's tensor, after checking it shards to `local`.
ShardSlice checked_slice(const PartSource& src, const std::string& name, const Shape& local) {
  const std::string file = src.in_store(name);
  ST_CHECK(src.store->contains(file), ValueError, src.store->where() << ": missing key '" << file << "'");
  const Shape& full = src.store->entry(file).shape;
  const ShardSpec spec = src.rule ? src.rule(name) : ShardSpec::replicate();
  ShardSlice slice;
  Shape want;
  try {
    slice = shard_slice(spec, full, src.tp, src.rank);
    want = full;
    if (!full.empty()) want[static_cast<size_t>(slice.dim)] = slice.extent;
  } catch (const ShapeError& e) {
    ST_THROW(ValueError, src.store->where() << ": '" << file << "' " << e.what());
  }
  ST_CHECK(want == local, ValueError,
           src.store->where() << ": '" << file << "' has shape " << shape_str(full) << ", the model expects "
                              << shape_str(local) << (src.tp > 1 ? " on this tp rank" : ""));
  return slice;
}

}  // namespace

Tensor read_part(const PartSource& src, const std::string& name, const Shape& local) {
  const ShardSlice slice = checked_slice(src, name, local);
  const std::string file = src.in_store(name);
  Tensor got = local.empty() ? src.store->read(file) : src.store->read_ranges(file, slice.dim, slice.ranges);
  if (got.shape() == local) return got;
  // the split dim was padded past the full size (a vocabulary padded to a multiple of tp): zeros
  Tensor out = Tensor::zeros(local, got.dtype());
  if (got.numel() > 0) out.narrow(slice.dim, 0, got.size(slice.dim)).copy_(got);
  return out;
}

void check_parts(const PartSource& src, const NamedTensors& targets, bool strict) {
  std::set<std::string> wanted;
  for (auto& [name, t] : targets) {
    checked_slice(src, name, t.shape());
    wanted.insert(src.in_store(name));
  }
  if (strict)
    for (const std::string& n : src.store->names())
      ST_CHECK(wanted.count(n), ValueError, src.store->where() << ": unexpected key '" << n << "'");
}

void load_parts(const PartSource& src, const NamedTensors& targets, bool strict) {
  check_parts(src, targets, strict);  // everything before writing anything
  NoGradGuard ng;
  for (auto& [name, t] : targets) {
    Tensor dst = t.detach();
    dst.copy_(read_part(src, name, t.shape()));
  }
}

}  // namespace st::runtime
