#include "runtime/parallel/state_io.h"

#include <set>

#include "ops/optim.h"

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

void check_dtype(const PartSource& src, const std::string& name, DType target) {
  const std::string file = src.in_store(name);
  ST_CHECK(src.store->contains(file), ValueError, src.store->where() << ": missing key '" << file << "'");
  const DType got = src.store->entry(file).dtype;  // as read: F64 → f32, U8 → i32
  auto is_float = [](DType d) { return d == DType::f32 || d == DType::f16 || d == DType::bf16; };
  ST_CHECK(is_float(got) == is_float(target), ValueError,
           src.store->where() << ": '" << file << "' is stored as " << src.store->entry(file).file_dtype
                              << ", the model holds it as " << dtype_name(target));
}

void check_parts(const PartSource& src, const NamedTensors& targets, bool strict) {
  std::set<std::string> wanted;
  for (auto& [name, t] : targets) {
    checked_slice(src, name, t.shape());
    check_dtype(src, name, t.dtype());
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

Tensor read_part_window(const PartSource& src, const std::string& name, const Shape& local, int64_t first,
                        int64_t count) {
  const ShardSlice slice = checked_slice(src, name, local);
  const std::string file = src.in_store(name);
  const Shape& full = src.store->entry(file).shape;
  const int64_t n = shape_numel(local);
  ST_CHECK(first >= 0 && count >= 0 && first + count <= n, ValueError,
           src.store->where() << ": '" << file << "': elements [" << first << ", " << first + count
                              << ") outside this rank's " << n);
  // the part as (outer, local, inner) around the split dim (dim 0 when whole); each contiguous
  // run of local elements — one range of one outer index — is one run of the file's elements
  const ElementMap m = element_map(slice, full);
  std::vector<SafetensorsReader::Run> runs;
  const int64_t row = m.local * m.inner, end = first + count;
  for (int64_t o = first / std::max<int64_t>(row, 1); row > 0 && o * row < end; ++o) {
    int64_t acc = 0;
    for (int k = 0; k < m.ranges; ++k) {
      const int64_t lo = o * row + acc * m.inner, hi = lo + m.length[k] * m.inner;  // local [lo, hi)
      const int64_t a = std::max(lo, first), b = std::min(hi, end);
      if (a < b) runs.push_back({(o * m.full + m.start[k]) * m.inner + (a - lo), a - first, b - a});
      acc += m.length[k];
    }  // past the ranges: padding, left zero
  }
  return src.store->read_runs(file, runs, count);
}

namespace {

// The `same_as` partner of `name` in the store, or "".
std::string same_as_of(const PretrainedSource& src, const std::string& name) {
  for (const auto& [param, other] : src.same_as)
    if (param == name) return other;
  return "";
}

void check_same(const PretrainedSource& src, const std::string& name, const std::string& other, const Tensor& mine,
                const Tensor& theirs) {
  ST_CHECK(theirs.to_double() == mine.to_double(), ValueError,
           src.store->where() << ": " << other << " differs from " << name
                              << " (untied heads are not supported)");
}

}  // namespace

void load_pretrained_parts(const PretrainedSource& src, const NamedTensors& targets) {
  load_parts(src.parts, targets, /*strict=*/false);
  for (auto& [name, t] : targets) {
    const std::string other = same_as_of(src, name);
    if (other.empty() || !src.store->contains(other)) continue;
    PartSource alias = src.parts;  // `other` read as this rank's part of `name`
    alias.file_name = [other](const std::string&) { return other; };
    check_same(src, name, other, t, read_part(alias, name, t.shape()));
  }
}

Tensor read_pretrained_window(const PretrainedSource& src, const std::string& name, const Shape& local, int64_t first,
                              int64_t count) {
  Tensor got = read_part_window(src.parts, name, local, first, count);
  const std::string other = same_as_of(src, name);
  if (!other.empty() && src.store->contains(other)) {
    PartSource alias = src.parts;
    alias.file_name = [other](const std::string&) { return other; };
    check_same(src, name, other, got, read_part_window(alias, name, local, first, count));
  }
  return got;
}

void check_finite(const NamedTensors& tensors, const std::string& where) {
  for (const auto& [name, t] : tensors) {
    if (!t.defined() || !(t.dtype() == DType::f32 || t.dtype() == DType::f16 || t.dtype() == DType::bf16)) continue;
    ST_CHECK(!ops::has_inf_nan(t), ValueError,
             where << ": tensor '" << name << "' holds inf or NaN");
  }
}

}  // namespace st::runtime
