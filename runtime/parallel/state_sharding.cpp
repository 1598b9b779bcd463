// Writing a checkpoint's parts: a plan (what this rank writes, in order), one all-gather of the
// per-rank counts (file names), then a streaming write with the tp groups' assemblies in turn.
#include "runtime/parallel/state_sharding.h"

#include <filesystem>

#include "runtime/io/safetensors.h"
#include "runtime/io/safetensors_index.h"
#include "tensor/autograd.h"

namespace st::runtime {
namespace {

// One entry of `state` as this rank sees it.
struct Item {
  std::string name;
  Tensor local;
  ShardSpec spec;
  Shape full;          // the full tensor's shape
  bool split = false;  // assembled over the tp group
  bool writes = false; // this rank writes it (a split one: it is this rank's turn)
};

Shape full_shape(const Shape& local, const ShardSpec& s, int tp) {
  if (s.kind == ShardSpec::Kind::replicated || local.empty()) return local;
  Shape full = local;
  const int64_t d = wrap_dim(s.dim, static_cast<int64_t>(local.size()), "checkpoint");
  full[static_cast<size_t>(d)] = s.pad_to_tp ? s.full_size : local[static_cast<size_t>(d)] * tp;
  return full;
}

// The full tensor of a split item on its writer; every tp rank takes part (one broadcast per rank).
Tensor assemble(const Item& it, comm::Communicator& tp) {
  Tensor full;
  if (it.writes) full = Tensor::empty(it.full, it.local.dtype(), it.local.device());
  for (int r = 0; r < tp.size(); ++r) {
    Tensor buf = r == tp.rank() ? it.local.detach().contiguous() : it.local.empty_like();  // (local shape)
    tp.broadcast(buf, r)->wait();
    if (!it.writes) continue;
    const ShardSlice slice = shard_slice(it.spec, it.full, tp.size(), r);
    int64_t at = 0;
    for (const DimRange& range : slice.ranges) {
      full.narrow(slice.dim, range.start, range.length).copy_(buf.narrow(slice.dim, at, range.length));
      at += range.length;
    }
  }
  return full;
}

}  // namespace

std::vector<std::string> write_parts(const std::string& dir, const std::string& base, const NamedTensors& state,
                                     const ShardRule& rule, const WrittenElsewhere& elsewhere,
                                     const StateSharding& sharding, const std::map<std::string, std::string>& metadata) {
  NoGradGuard ng;
  const int tp = sharding.tp ? sharding.tp->size() : 1;
  std::vector<Item> plan;
  int turn = 0;  // split tensors round-robin over the tp group
  for (auto& [name, t] : state) {
    if (!sharding.writes || (elsewhere && elsewhere(name))) continue;
    Item it{name, t, rule && tp > 1 ? rule(name) : ShardSpec::replicate(), {}, false, true};
    it.split = it.spec.kind == ShardSpec::Kind::split && !t.shape().empty();
    it.full = it.split ? full_shape(t.shape(), it.spec, tp) : t.shape();
    if (it.split) it.writes = turn++ % tp == sharding.tp->rank();
    plan.push_back(std::move(it));
  }
  std::vector<SafetensorsWriter::Spec> specs;
  for (const Item& it : plan)
    if (it.writes) specs.push_back({it.name, it.local.dtype(), it.full});

  // every rank's count → the file names
  const int world = sharding.world ? sharding.world->size() : 1;
  std::vector<int64_t> counts{static_cast<int64_t>(specs.size())};
  if (world > 1) {
    Tensor all = Tensor::empty({world}, DType::i64);  // (world)
    sharding.world->all_gather(Tensor::from_vector(counts, {1}), all)->wait();
    const int64_t* p = all.data<int64_t>();
    counts.assign(p, p + world);
  }
  int n = 0, mine = -1;
  for (int r = 0; r < world; ++r)
    if (counts[static_cast<size_t>(r)] > 0) {
      if (r == sharding.rank()) mine = n;
      ++n;
    }
  std::vector<std::string> files;
  for (int k = 0; k < n; ++k) files.push_back(n == 1 ? base + ".safetensors" : shard_file_name(base, k + 1, n));

  std::unique_ptr<SafetensorsWriter> out;
  if (mine >= 0)
    out = std::make_unique<SafetensorsWriter>((std::filesystem::path(dir) / files[static_cast<size_t>(mine)]).string(),
                                              specs, metadata);
  for (const Item& it : plan) {
    const Tensor t = it.split ? assemble(it, *sharding.tp) : it.local;
    if (it.writes) out->write(t);
  }
  if (out) out->finish();
  return files;
}

}  // namespace st::runtime
