// SnapshotPlans (see the header): the kept plans, the check of a later save's entries against
// them, the ranks' agreement on a rebuild and the copies to the kept offsets.
#include "runtime/train/snapshot_plans.h"

#include "runtime/observe/trace.h"
#include "runtime/parallel/tp_shard.h"
#include "tensor/autograd.h"

namespace st::runtime {
namespace {

// True on every rank when `mine` is on any (one all-reduce (max) of one i64; one rank: none).
bool on_any_rank(bool mine, const StateSharding& sharding) {
  if (!sharding.world || sharding.world->size() <= 1) return mine;
  Tensor flag = Tensor::from_vector(std::vector<int64_t>{mine ? 1 : 0}, {1});  // (1)
  if (std::string(sharding.world->backend()) == "nccl") flag = flag.to(Device::cuda);  // NCCL reduces device tensors
  sharding.world->all_reduce(flag, comm::ReduceOp::max)->wait();
  return flag.to(Device::cpu).data<int64_t>()[0] != 0;
}

}  // namespace

SnapshotPlans::SnapshotPlans()
    : model_host_(std::make_shared<HostStaging>()), optimizer_host_(std::make_shared<HostStaging>()) {}

void SnapshotPlans::download_directly(const Tensor& block) {
  model_host_->download_directly(block);
  optimizer_host_->download_directly(block);
}

void SnapshotPlans::release() {
  model_host_->release();
  optimizer_host_->release();
}

bool SnapshotPlans::same(const Kept& kept, const NamedTensors& entries) {
  if (kept.keys.size() != entries.size()) return false;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Key& k = kept.keys[i];
    const Tensor& t = entries[i].second;
    if (k.name != entries[i].first || k.dtype != t.dtype() || k.device != t.device() || k.shape != t.shape())
      return false;
  }
  return true;
}

SnapshotPlans::Kept SnapshotPlans::keep(const NamedTensors& entries, PartSnapshot snap) {
  Kept kept;
  kept.keys.reserve(entries.size());
  for (const auto& [name, t] : entries) kept.keys.push_back({name, t.shape(), t.dtype(), t.device()});
  // the written keys are a subsequence of the entries, in their order (snapshot_parts's plan)
  size_t i = 0;
  for (const SafetensorsWriter::Spec& s : snap.specs) {
    while (i < entries.size() && entries[i].first != s.name) ++i;
    ST_CHECK(i < entries.size(), Error, "SnapshotPlans: the plan writes '" << s.name << "', which is not an entry");
    ST_CHECK(entries[i].second.shape() == s.shape, Error,
             "SnapshotPlans: '" << s.name << "' is written as " << shape_str(s.shape) << " from "
                                << shape_str(entries[i].second.shape()) << " (an assembled tensor cannot be kept)");
    kept.source.push_back(i++);
  }
  kept.snap = std::make_shared<const PartSnapshot>(std::move(snap));
  return kept;
}

void SnapshotPlans::copy(const Kept& kept, const NamedTensors& entries, HostStaging& host) {
  host.release();  // nothing in flight (the previous save's writers finished): a no-op but for CUDA's fence
  for (size_t k = 0; k < kept.source.size(); ++k) host.copy_in(entries[kept.source[k]].second, kept.snap->offsets[k]);
  host.flush();
}

SnapshotPlans::Parts SnapshotPlans::snapshot(const NamedTensors& weights, const NamedTensors& optimizer_state,
                                             const ShardRule& rule, const WrittenElsewhere& weights_elsewhere,
                                             const WrittenElsewhere& optimizer_elsewhere, const StateSharding& sharding,
                                             const std::map<std::string, std::string>& model_metadata) {
  NoGradGuard ng;
  // under tp > 1 the split tensors are assembled over the group at every save: nothing to keep
  const bool keepable = !sharding.tp || sharding.tp->size() <= 1;
  if (keepable && kept_) {
    bool changed;
    {
      trace::Scope ts("checkpoint check", "optimizer");
      changed = on_any_rank(!same(model_, weights) || !same(optimizer_, optimizer_state), sharding);
    }
    if (!changed) {
      trace::Scope ts("checkpoint copy", "optimizer");
      copy(model_, weights, *model_host_);
      copy(optimizer_, optimizer_state, *optimizer_host_);
      return {model_.snap, optimizer_.snap, true};
    }
  }
  trace::Scope ts("checkpoint plan", "optimizer");
  PartSnapshot model = snapshot_parts("model", weights, rule, weights_elsewhere, sharding, model_host_, model_metadata);
  const ShardRule state_rule = rule ? optimizer_state_shard_rule(rule) : nullptr;
  PartSnapshot optimizer =
      snapshot_parts("optimizer", optimizer_state, state_rule, optimizer_elsewhere, sharding, optimizer_host_);
  ++builds_;
  kept_ = keepable;
  if (!keepable) {
    model_ = optimizer_ = Kept{};
    return {std::make_shared<const PartSnapshot>(std::move(model)),
            std::make_shared<const PartSnapshot>(std::move(optimizer)), false};
  }
  model_ = keep(weights, std::move(model));
  optimizer_ = keep(optimizer_state, std::move(optimizer));
  return {model_.snap, optimizer_.snap, false};
}

}  // namespace st::runtime
