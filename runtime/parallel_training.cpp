#include "runtime/parallel_training.h"

#include <algorithm>
#include <iostream>
#include <set>

#include "comm/make_communicator.h"
#include "comm/process_grid.h"
#include "runtime/grad_reducer.h"
#include "runtime/layer_profile.h"
#include "runtime/pipeline_source.h"
#include "runtime/state_gather.h"
#include "runtime/trainer.h"
#include "runtime/zero1.h"
#include "tensor/autograd.h"

namespace st::runtime {
namespace {

// Scalar sums and maxima over a communicator (f32 on the wire: the values are a handful of
// per-rank shares, so the f32 rounding of their sum is far below the 1e-5 the layouts agree to).
class CommReductions : public Reductions {
 public:
  // sum_weight scales this rank's contribution to sums (0: a copy another rank already adds)
  explicit CommReductions(std::shared_ptr<comm::Communicator> c, double sum_weight = 1.0)
      : c_(std::move(c)), sum_weight_(sum_weight) {}
  double allreduce_sum(double x) override { return reduce(sum_weight_ * x, comm::ReduceOp::sum); }
  double allreduce_max(double x) override { return reduce(x, comm::ReduceOp::max); }

 private:
  double reduce(double x, comm::ReduceOp op) {
    if (!c_ || c_->size() == 1) return x;
    Tensor t = Tensor::from_vector(std::vector<double>{x}, {1});  // () → f32
    c_->all_reduce(t, op)->wait();
    return t.item();
  }
  std::shared_ptr<comm::Communicator> c_;
  double sum_weight_;
};

DType comm_dtype_of(const std::string& s) {
  if (s == "fp32" || s == "f32") return DType::f32;
  if (s == "bf16") return DType::bf16;
  if (s == "fp16" || s == "f16") return DType::f16;
  ST_THROW(ValueError, "--grad-comm-dtype '" << s << "' is not one of fp32, bf16, fp16");
}

}  // namespace

int run_parallel_training(const TrainConfig& cfg) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.timeout_s * 1000));
  comm::CommSetup setup = comm::make_communicator(cfg.comm, timeout);
  auto world = setup.world;
  const bool lead = world->rank() == 0;
  comm::GridLayout grid_layout = comm::GridLayout::make(world->size(), static_cast<int>(cfg.dp),
                                                        static_cast<int>(cfg.tp), static_cast<int>(cfg.pp));
  if (world->size() == 1) return run_training(cfg);
  if (lead) std::cout << "layout: " << grid_layout.str() << " | comm " << setup.reason << std::endl;
  comm::ProcessGrid grid(world, grid_layout.dp, grid_layout.tp, grid_layout.pp);
  const comm::GridCoord me = grid.coord();
  const int pp = grid_layout.pp, dp = grid_layout.dp;

  TrainInputs in = prepare_training(cfg, dp, me.dp, grid.tp_group());
  const ShardRule rule = in.model->shard_rule();  // null unless tp > 1
  std::shared_ptr<LanguageModel> model = in.model;
  std::shared_ptr<StageModel> stage;
  std::vector<std::string> tied;
  TrainerParts parts;
  LocalGradientSource* local_source = nullptr;
  PipelineGradientSource* pipe_source = nullptr;
  if (pp > 1) {
    std::vector<double> costs;
    if (cfg.partition == "profile")
      costs = profile_layers(*in.model, in.layout.micro_batch, in.layout.seq_len, in.device, world.get());
    Partition part = choose_partition(cfg.partition, *in.model, pp, in.layout.seq_len, costs);
    if (lead) {
      std::vector<double> shown = costs;
      if (shown.empty())
        for (auto& l : in.model->layers()) shown.push_back(l->cost(in.layout.seq_len).param_bytes);
      std::cout << "partition (" << cfg.partition << "): " << part.describe(shown) << std::endl;
    }
    stage = std::make_shared<StageModel>(in.model, part.begin(me.pp), part.end(me.pp));
    model = stage;
    tied = tied_across_stages(*in.model, part);
    auto src = std::make_unique<PipelineGradientSource>(stage, in.data, in.layout, in.device, grid.pp_group(),
                                                        cfg.schedule, /*count_loss=*/me.tp == 0);
    pipe_source = src.get();
    parts.source = std::move(src);
  } else {
    auto src = std::make_unique<LocalGradientSource>(in.model, in.data, in.layout, in.device);
    local_source = src.get();
    parts.source = std::move(src);
  }
  // every tp rank computes the same loss: only tp rank 0 adds it (the pipeline source already
  // returns 0 on the other ranks)
  parts.loss_reduction = std::make_shared<CommReductions>(world, pp > 1 || me.tp == 0 ? 1.0 : 0.0);
  parts.flag_reduction = parts.loss_reduction;
  // the ranks of one DP replica hold different parts of the gradient (stages); replicas hold copies
  std::shared_ptr<comm::Communicator> replica_group = world->split(me.dp, world->rank(), "replica");
  // ZeRO-1: DP ranks hold different shards too. Ownership is fixed by the parameter sizes, so a
  // first Zero1 over the f32 parameters tells the trainer which names its optimizer covers; the
  // working one is built after the optimizer has cast the parameters to the compute dtype. With
  // tp > 1 each tp rank's dp group shards that rank's own (tp-sharded) list; the shard shapes are
  // equal across tp ranks, so every tp rank owns the same names and the norm weights still count
  // a replicated tensor once (tests/parallel: dp 2 × tp 2 with zero 1 equals one process).
  const bool zero = cfg.zero && dp > 1;
  parts.grad_reduction = std::make_shared<CommReductions>(zero ? world : replica_group);
  if (zero) {
    std::set<std::string> owned;
    {
      Zero1 probe(model->named_parameters(), grid.dp_group());
      for (auto& [name, p] : probe.owned()) owned.insert(name);
    }
    parts.optimizer_owns = [owned](const std::string& name) { return owned.count(name) > 0; };
  }
  // Each parameter counted once in the global norm: a weight tied across stages on its first
  // stage only, a tensor replicated over the tp group on tp rank 0 only.
  {
    std::set<std::string> tied_set(tied.begin(), tied.end());
    const bool first_stage = !stage || stage->is_first();
    const int tp_rank = me.tp;
    parts.norm_weight = [tied_set, first_stage, rule, tp_rank](const std::string& name) {
      if (!first_stage && tied_set.count(name)) return 0.0;
      if (rule && tp_rank != 0 && rule(name).kind == ShardSpec::Kind::replicated) return 0.0;
      return 1.0;
    };
  }
  if (pp > 1 || zero || rule) {  // each rank holds a part of the checkpoint: gather it onto rank 0
    parts.partial_state = pp > 1 || zero;
    const std::string ckdir = cfg.checkpoint_dir;
    const bool contribute = me.tp == 0 && (zero || me.dp == 0);  // ZeRO: every DP rank has a shard
    auto tp = grid.tp_group();
    parts.gather_state = [world, tp, rule, ckdir, contribute](const NamedTensors& local, const std::string& what) {
      NamedTensors full = local;
      if (rule)  // tp shards → full tensors (collective over the tp group)
        full = gather_state_dict(local, what == "optimizer" ? optimizer_state_shard_rule(rule) : rule, *tp);
      return gather_named_tensors(full, contribute, *world, ckdir, what);
    };
    if (rule) {
      const int tp_size = grid_layout.tp, tp_rank = me.tp;
      parts.shard_loaded_state = [rule, tp_size, tp_rank](const std::map<std::string, Tensor>& full) {
        NamedTensors list(full.begin(), full.end());
        std::map<std::string, Tensor> out;
        for (auto& [n, t] : shard_state_dict(list, optimizer_state_shard_rule(rule), tp_size, tp_rank)) out.emplace(n, t);
        return out;
      };
    }
  }
  parts.rank = world->rank();
  parts.world_size = world->size();
  parts.barrier = [world] { world->barrier()->wait(); };
  parts.layout = in.layout;

  Trainer trainer(cfg, model, std::move(parts), in.resume_path);

  // Built after the trainer: the optimizer has cast the parameters to the compute dtype.
  std::shared_ptr<GradReducer> reducer;
  std::shared_ptr<Zero1> zero1;
  if (zero) {
    zero1 = std::make_shared<Zero1>(model->named_parameters(), grid.dp_group());
    trainer.parts().zero_grad = [zero1] { zero1->zero_grad(); };
    trainer.parts().after_step = [zero1] { zero1->all_gather(); };
  } else if (dp > 1) {
    ReducerOptions ro;
    ro.bucket_bytes = static_cast<size_t>(cfg.bucket_mb * (1 << 20));
    ro.first_bucket_bytes = std::min<size_t>(ro.bucket_bytes, 1u << 20);
    ro.comm_dtype = comm_dtype_of(cfg.grad_comm_dtype);
    reducer = std::make_shared<GradReducer>(model->named_parameters(), grid.dp_group(), ro);
    trainer.parts().zero_grad = [reducer] {
      reducer->zero_grad();
      reducer->set_sync(false);
    };
    if (local_source) local_source->set_micro_batch_hook([reducer](int64_t, bool last) { reducer->set_sync(last); });
    if (pipe_source) pipe_source->set_on_last_backward([reducer] { reducer->set_sync(true); });
  }
  // wte & co.: the first and the last stage of one (dp, tp) position sum their gradients
  std::shared_ptr<comm::Communicator> tied_group;
  if (pp > 1) {
    const bool ends = stage->is_first() || stage->is_last();
    const int color = ends && !tied.empty() ? me.dp * grid_layout.tp + me.tp : -1;
    tied_group = world->split(color, me.pp, "tied");
  }
  std::vector<Tensor> tied_params;
  if (tied_group)
    for (auto& [name, p] : model->named_parameters())
      if (std::find(tied.begin(), tied.end(), name) != tied.end()) tied_params.push_back(p);
  trainer.parts().gradients_complete = [reducer, zero1, tied_group, tied_params] {
    if (reducer) reducer->finalize();
    // sums are linear: the tied pair can add its local (ZeRO: not yet reduced) gradients first
    for (const Tensor& p : tied_params) {
      Tensor g = p.grad();
      if (!g.defined()) {
        g = Tensor::zeros(p.shape(), p.dtype(), p.device());
        Tensor(p).set_grad(g);
      }
      tied_group->all_reduce(g, comm::ReduceOp::sum)->wait();
    }
    if (zero1) zero1->reduce_scatter();
  };
  trainer.run();
  if (lead && reducer && reducer->stats().buckets_launched > 0) {
    const ReducerStats& s = reducer->stats();
    std::cout << "data parallel: " << s.buckets_launched << " bucket all-reduces, "
              << s.bytes / (1 << 20) << " MiB; communication " << s.comm_ms << " ms, exposed after backward "
              << s.exposed_ms << " ms (" << (s.comm_ms > 0 ? 100.0 * (1.0 - s.exposed_ms / s.comm_ms) : 0.0)
              << "% hidden)" << std::endl;
  }
  if (lead && pipe_source)
    std::cout << "pipeline stage 0: compute " << pipe_source->stats().compute_ms << " ms, waiting "
              << pipe_source->stats().wait_ms << " ms in the last step" << std::endl;
  world->barrier()->wait();
  return 0;
}

}  // namespace st::runtime
