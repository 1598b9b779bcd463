// The DP × CP × TP × PP wiring of one rank: one function per axis, each adding its parts to the
// TrainerWiring before the Trainer is built (see the header for what each axis does).
#include "runtime/train/parallel_training.h"

#include <algorithm>
#include <iostream>

#include "comm/make_communicator.h"
#include "comm/process_grid.h"
#include "runtime/common/startup_phase.h"
#include "runtime/plan/memory_plan.h"
#include "runtime/parallel/grad_reducer.h"
#include "runtime/parallel/parameter_sharding.h"
#include "runtime/parallel/gradient_sync.h"
#include "runtime/parallel/zero1.h"
#include "runtime/pipeline/layer_profile.h"
#include "runtime/setup/checkpoint_guard.h"
#include "runtime/setup/model_registry.h"
#include "runtime/train/pipeline_source.h"
#include "runtime/setup/run_fingerprint.h"
#include "runtime/train/trainer.h"

namespace st::runtime {
namespace {

// What every axis reads: the options, the world, the grid and this rank's place in it.
struct Job {
  const TrainConfig& cfg;
  std::shared_ptr<comm::Communicator> world;
  comm::ProcessGrid& grid;
  comm::GridCoord me;
  const TrainSeams& seams;
  bool lead() const { return world->rank() == 0; }
  // ZeRO shards over the ranks that sum the gradients: dp × cp (the weights are replicated over both)
  int zero_stage() const { return zero_stage_in_effect(cfg.zero, grid.layout().dp * grid.layout().cp); }
};

// Pipeline (pp > 1): the split of the model's layers into pp · v pieces (v the virtual stages of
// the interleaved schedule, 1 otherwise) by --partition, from its description; a profile builds
// one layer at a time. Every rank computes the same split.
Partition plan_pipeline(const Job& job, const ModelPlan& plan) {
  const int pp = job.grid.layout().pp, v = static_cast<int>(job.cfg.virtual_stages);
  std::vector<double> profiled;
  if (job.cfg.partition == PartitionKind::profile) {
    LayerBuilder one_layer = [&](int i) {
      auto m = build_model_from_json(plan.entry, ModelBuild{{LayerRange{i, i + 1}}, job.grid.tp_group(), 0});
      m->move_parameters(job.cfg.device);
      return m;
    };
    profiled = profile_layers(one_layer, static_cast<int>(plan.description.layers.size()), job.cfg.micro_batch,
                              plan.seq_len, job.cfg.device, job.world.get());
  }
  const Partition part = choose_partition(job.cfg.partition, plan.description, pp * v, profiled);
  if (job.lead()) {
    std::vector<double> shown = partition_costs(job.cfg.partition, plan.description, profiled);
    if (shown.empty())
      for (auto& l : plan.description.layers) shown.push_back(l.param_bytes());
    std::cout << "partition (" << to_string(job.cfg.partition) << (v > 1 ? ", piece q on stage q mod pp" : "")
              << "): " << part.describe(shown) << std::endl;
  }
  return part;
}

// This rank's stage (the model holds only its chunks of `part`), driven by the schedule. Returns
// the weights this stage shares with another (tied across stages).
std::vector<TiedWeight> wire_pipeline(const Job& job, const ModelPlan& plan, const Partition& part,
                                      const TrainInputs& in, std::shared_ptr<LanguageModel>& model, TrainerWiring& w,
                                      PipelineGradientSource*& source) {
  const int pp = job.grid.layout().pp, v = static_cast<int>(job.cfg.virtual_stages);
  auto stage = std::make_shared<StageModel>(in.model);
  model = stage;
  auto src = std::make_unique<PipelineGradientSource>(
      stage, in.data, in.layout, in.device, job.grid.pp_group(),
      make_plan(job.cfg.schedule, job.me.pp, pp, static_cast<int>(in.layout.grad_accum), v),
      /*count_loss=*/job.me.tp == 0);
  source = src.get();
  w.source = std::move(src);
  std::vector<TiedWeight> all = tied_across_stages(plan.description, part, pp), mine;
  for (const TiedWeight& t : all)  // one group sums them all (wire_tied_weights); every rank checks alike
    ST_CHECK(t.stages == all.front().stages, ValueError,
             "pipeline: weights tied across different stages (" << all.front().name << " and " << t.name
                                                                << ") are not supported");
  for (TiedWeight& t : all) {
    if (std::find(t.stages.begin(), t.stages.end(), job.me.pp) == t.stages.end()) continue;
    if (t.stages.front() != job.me.pp) w.roles.counted_elsewhere.insert(t.name);  // the lowest stage counts it
    mine.push_back(std::move(t));
  }
  return mine;
}

// Context parallel (cp > 1): the model runs on this rank's two chunks of every sequence, its
// attention a ring over the cp group (built so: prepare_training's ModelForm; a family without
// that form refuses there); the gradient source, local or pipeline, keeps those chunks of the
// replica's micro-batches (T % 2·cp: TrainConfig::validate, LocalGradientSource). The weights are
// replicated over cp: the gradients are summed over dp × cp (wire_data_parallel), the norm counts
// one cp rank (wire_reductions), the cp index 0 ranks write the checkpoints.
void wire_context_parallel(const Job& job, TrainInputs& in) {
  in.layout.cp = job.grid.layout().cp;
  in.layout.cp_rank = job.me.cp;
}

// Tensor parallel (tp > 1): each tp rank holds a shard of the split tensors and a copy of the
// replicated ones, which only tp rank 0 counts in the norm.
void wire_tensor_parallel(const Job& job, const ShardRule& rule, const LanguageModel& model, TrainerWiring& w) {
  if (job.me.tp == 0) return;
  for (auto& [name, p] : model.named_parameters())
    if (rule(name).kind == ShardSpec::Kind::replicated) w.roles.counted_elsewhere.insert(name);
}

// The gradient buckets of DP and ZeRO alike: --bucket-mb (the first bucket at most 1 MiB, so
// communication starts early) and --grad-comm-dtype.
ReducerOptions reducer_options(const TrainConfig& cfg, const TrainSeams& seams) {
  ReducerOptions ro;
  ro.skip_collectives = seams.skip_grad_comm;
  ro.bucket_bytes = static_cast<size_t>(cfg.bucket_mb * (1 << 20));
  ro.first_bucket_bytes = std::min<size_t>(ro.bucket_bytes, 1u << 20);
  ro.comm_dtype = precision_policy(cfg).grad_comm;
  return ro;
}

// ZeRO-1 and -2 (dp > 1): each DP rank's optimizer owns a contiguous run of the parameters; the
// gradients reach the owners bucket by bucket during the last backward (ZeRO-2: the other
// owners' buckets are freed as soon as they are reduced, grad_reducer.h). With tp > 1 each tp
// rank's dp group shards that rank's own (tp-sharded) list; the shard shapes are equal across
// tp ranks, so every tp rank owns the same names and the norm weights still count a replicated
// tensor once (tests: dp 2 × tp 2 with zero 1 equals one process). Each bucket is reduced to its
// owner only, so weights tied across stages are summed over them first: their buckets wait for
// finish(), which runs after the tied sum's (zero1.h).
std::shared_ptr<ZeroSync> wire_zero(const Job& job, const LanguageModel& model, const std::vector<TiedWeight>& tied,
                                    TrainerWiring& w) {
  ReducerOptions ro = reducer_options(job.cfg, job.seams);
  ro.shard_gradients = job.cfg.zero >= 2;  // ZeRO-2: other owners' buckets freed once reduced
  for (const TiedWeight& t : tied) ro.launch_in_finalize.insert(t.name);
  // over the ranks that sum the gradients: dp × cp (the dp group itself at cp 1)
  auto zero1 = std::make_shared<Zero1>(model.named_parameters(), job.grid.dp_cp_group(), ro);
  for (auto& [name, p] : model.named_parameters())
    if (!zero1->owns(name)) w.roles.updated_elsewhere.insert(name);
  return std::make_shared<ZeroSync>(zero1);
}

// ZeRO-3 (dp × cp > 1): every parameter sharded per unit (a layer; a weight tied between layers
// or stages a unit of its own) over the ranks that sum the gradients — the dp group, or with
// context parallelism the dp × cp group, the weights being replicated over both — gathered around
// each layer's forward and backward (runtime/parallel/zero3.h); the optimizer steps this rank's
// pieces. Weights tied across stages:
// their gradient shards summed over the tied group after the reduce-scatters.
std::shared_ptr<Zero3Sync> wire_zero3(const Job& job, LanguageModel& model, const std::vector<TiedWeight>& tied,
                                      std::shared_ptr<comm::Communicator> tied_group, TrainerWiring& w) {
  std::set<std::string> own;
  for (const std::string& n : model.tied_names()) own.insert(n);
  std::vector<std::string> tied_names;
  for (const TiedWeight& t : tied) {
    own.insert(t.name);
    tied_names.push_back(t.name);
  }
  auto zero3 = std::make_shared<Zero3>(model, job.grid.dp_cp_group(), own, precision_policy(job.cfg).grad_comm);
  model.set_layer_hook(zero3);
  w.params = std::make_shared<Zero3Parameters>(zero3);
  return std::make_shared<Zero3Sync>(zero3, tied_names, tied_group);
}

// Data parallel (dp × cp > 1, no ZeRO): bucketed all-reduce during the last micro-batch's
// backward over the ranks holding copies of the same weights — the DP group, or with context
// parallelism the dp × cp group (each cp rank's gradient is that of its chunks' tokens).
std::shared_ptr<DataParallelSync> wire_data_parallel(const Job& job, const LanguageModel& model) {
  auto reducer = std::make_shared<GradReducer>(model.named_parameters(), job.grid.dp_cp_group(), reducer_options(job.cfg, job.seams));
  return std::make_shared<DataParallelSync>(reducer);
}

// Weights tied across stages (the GPT's wte on the first and the last stage): the stages holding
// them, of one (dp, cp, tp) position, sum their gradients over a group of their own (every tied
// weight is held by the same stages: wire_pipeline checks); the sum over dp × cp is the DP sync's.
// The color is the position's index in the grid's rank order, so the cp ranks of a (dp, tp)
// position get groups of their own. Collective over the world (the split) even for ranks that
// hold no tied weight.
std::shared_ptr<TiedGradSync> wire_tied_weights(const Job& job, const StageModel& stage,
                                                const std::vector<TiedWeight>& tied) {
  const comm::GridLayout& g = job.grid.layout();
  const int color = tied.empty() ? -1 : (job.me.dp * g.cp + job.me.cp) * g.tp + job.me.tp;
  std::shared_ptr<comm::Communicator> group = job.world->split(color, job.me.pp, "tied");
  if (!group) return nullptr;
  std::vector<Tensor> params;
  for (auto& [name, p] : stage.named_parameters())
    if (std::any_of(tied.begin(), tied.end(), [&](const TiedWeight& t) { return t.name == name; }))
      params.push_back(p);
  return std::make_shared<TiedGradSync>(params, group);
}

// The scalar reductions: losses over the world (only the ranks that own a share add one: the
// last stage, tp rank 0; every cp rank, each its chunks), the squared norm over the ranks holding
// different parts of the gradient (one DP replica's cp rank 0 ... each cp index of it: the same
// values on each, so a group per (dp, cp) index; the world under ZeRO), the fp16 flag over the world.
StepReductions wire_reductions(const Job& job) {
  const bool pipeline = job.grid.layout().pp > 1;
  StepReductions r;
  // the pipeline source already returns 0 on tp ranks > 0
  r.loss = std::make_shared<CommReductions>(job.world, pipeline || job.me.tp == 0 ? 1.0 : 0.0);
  r.flag = r.loss;
  const int cp = job.grid.layout().cp;
  std::shared_ptr<comm::Communicator> replica =
      job.world->split(job.me.dp * cp + job.me.cp, job.world->rank(), "replica");
  r.grad = std::make_shared<CommReductions>(job.zero_stage() > 0 ? job.world : replica);
  return r;
}

// What a run can measure about its gradient communication by itself: how many buckets went out
// while backward was still producing gradients, and how long finish() waited per step. (How much
// communication is hidden needs a second run without it: tests/bench/bench_dp_overlap.cpp.)
void print_summary(const Job& job, const GradReducer* reducer, const Zero1* zero, const Zero3* zero3,
                   const PipelineGradientSource* pipe) {
  if (!job.lead()) return;
  if (reducer && reducer->stats().steps > 0) {
    const ReducerStats& s = reducer->stats();
    const double steps = static_cast<double>(s.steps);
    const std::string what = zero ? "zero " + std::to_string(job.zero_stage())
                                  : job.grid.layout().cp > 1 ? std::string("gradient sum over dp x cp")
                                                             : std::string("data parallel");
    std::cout << what << ": " << s.buckets_launched / s.steps << " buckets per step ("
              << s.launched_early << " of " << s.buckets_launched << " launched before backward ended), "
              << static_cast<double>(s.bytes) / steps / (1 << 20) << " MiB per step; finish() waited "
              << s.wait_ms / steps << " ms per step";
    if (zero && zero->stats().broadcasts > 0)
      std::cout << "; updated values broadcast " << static_cast<double>(zero->stats().bytes_broadcast) / steps / (1 << 20)
                << " MiB, " << zero->stats().broadcast_ms / steps << " ms per step";
    std::cout << std::endl;
  }
  if (zero3 && zero3->stats().gathers > 0)
    std::cout << "zero 3: " << zero3->num_units() << " units, " << zero3->shard_numel()
              << " parameter elements on this rank; " << zero3->stats().gathers << " gathers ("
              << static_cast<double>(zero3->stats().bytes_gathered) / (1 << 20) << " MiB), "
              << zero3->stats().reduce_scatters << " reduce-scatters, at most " << zero3->stats().max_gathered
              << " units gathered at once" << std::endl;
  if (pipe)
    std::cout << "pipeline stage 0: compute " << pipe->stats().compute_ms << " ms, waiting " << pipe->stats().wait_ms
              << " ms in the last step" << std::endl;
}

}  // namespace

int run_parallel_training(const TrainConfig& cfg, const TrainSeams& seams) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.timeout_s * 1000));
  comm::CommOptions options = cfg.comm_options;
  options.flight_recorder_dump = cfg.flight_recorder_dump;
  comm::CommSetup setup = comm::make_communicator(cfg.comm, timeout, options);
  auto world = setup.world;
  // first collective of the job: ranks started with different options stop here, named
  if (world->size() > 1) check_ranks_agree(run_fingerprint(cfg), *world);
  startup_phase("loading");  // every rank is here: the watchdog's next phase (runtime/common/startup_phase.h)
  comm::GridLayout layout = comm::GridLayout::make(world->size(), static_cast<int>(cfg.dp), static_cast<int>(cfg.tp),
                                                   static_cast<int>(cfg.pp), static_cast<int>(cfg.cp));
  if (world->size() == 1) return run_training(cfg, seams);
  if (world->rank() == 0) std::cout << "layout: " << layout.str() << " | comm " << setup.reason << std::endl;
  // rank 0 looks at --checkpoint-dir; every rank refuses (or goes on) alike
  if (const std::string note = check_checkpoint_dir(cfg, world.get()); !note.empty() && world->rank() == 0)
    std::cout << note << std::endl;
  comm::ProcessGrid grid(world, layout.dp, layout.tp, layout.pp, layout.cp);
  const Job job{cfg, world, grid, grid.coord(), seams};

  const ModelPlan plan = plan_model(cfg, layout.tp, layout.dp);
  if (!plan.resume_note.empty() && world->rank() == 0) std::cout << plan.resume_note << std::endl;
  register_memory_cap(cfg, plan.entry, plan.seq_len, layout.dp, world->rank());  // --max-memory
  Partition part;
  std::vector<LayerRange> stage_layers;  // empty: all
  if (layout.pp > 1) {
    part = plan_pipeline(job, plan);
    stage_layers = stage_chunks(part, job.me.pp, layout.pp);
  }
  // ZeRO-3 builds no parameter's bytes: each rank fills only its pieces (Trainer, Zero3::shard)
  TrainInputs in = prepare_training(cfg, plan, stage_layers, layout.dp, job.me.dp, grid.tp_group(),
                                    /*sharded_start=*/job.zero_stage() == 3, grid.cp_group());
  if (layout.cp > 1) wire_context_parallel(job, in);
  const ShardRule rule = in.model->shard_rule();  // null unless tp > 1
  std::shared_ptr<LanguageModel> model = in.model;
  TrainerWiring w;
  w.world = world;
  w.seams = seams;
  w.layout = in.layout;

  PipelineGradientSource* pipe = nullptr;
  std::vector<TiedWeight> tied;
  if (layout.pp > 1)
    tied = wire_pipeline(job, plan, part, in, model, w, pipe);
  else
    w.source = std::make_unique<LocalGradientSource>(in.model, in.data, in.layout, in.device);
  if (rule) wire_tensor_parallel(job, rule, *model, w);
  w.reductions = wire_reductions(job);
  // --fp8-scaling delayed: the amaxes agreed over the stage's dp × tp ranks (not across stages:
  // they hold other layers); its dp 0 / tp 0 writes the states (runtime/train/fp8_delayed.h)
  const PrecisionPolicy policy = precision_policy(cfg);
  if (policy.fp8 && policy.fp8->mode == ops::Fp8ScaleMode::delayed)
    w.fp8_amax_group = world->split(job.me.pp, world->rank(), "fp8-amax");
  w.writes_fp8_state = job.me.dp == 0 && job.me.tp == 0 && job.me.cp == 0;

  std::vector<std::shared_ptr<GradientSync>> syncs;
  std::shared_ptr<DataParallelSync> dp_sync;
  std::shared_ptr<ZeroSync> zero_sync;
  std::shared_ptr<Zero3Sync> zero3_sync;
  std::shared_ptr<TiedGradSync> tied_sync =
      layout.pp > 1 ? wire_tied_weights(job, static_cast<const StageModel&>(*model), tied) : nullptr;
  // order of finish(): the DP all-reduce, then the tied sum; under ZeRO the tied sum, then the
  // reduce to the owners (zero1.h says why); under ZeRO-3 the reduce-scatters, then the tied sum
  // of the shards (Zero3Sync)
  if (job.zero_stage() == 3) {
    syncs.push_back(zero3_sync = wire_zero3(job, *model, tied, tied_sync ? tied_sync->group() : nullptr, w));
  } else if (job.zero_stage() > 0) {
    if (tied_sync) syncs.push_back(tied_sync);
    syncs.push_back(zero_sync = wire_zero(job, *model, tied, w));
  } else {
    if (layout.dp * layout.cp > 1)
      syncs.push_back(dp_sync = wire_data_parallel(job, *model));
    else
      syncs.push_back(std::make_shared<ClearGrads>(model));
    if (tied_sync) syncs.push_back(tied_sync);
  }
  w.sync = syncs.size() == 1 ? syncs.front() : std::make_shared<SyncChain>(syncs);

  // checkpoints: every rank writes its share; a DP replica's copy only DP rank 0 and the cp ranks'
  // copies only cp rank 0 (ZeRO: every rank of dp × cp its shard), tp-split tensors assembled in the tp group
  w.state = std::make_shared<StateSharding>(
      StateSharding{world, grid.tp_group(), job.zero_stage() > 0 || (job.me.dp == 0 && job.me.cp == 0)});

  Trainer trainer(cfg, model, std::move(w), in.resume_path);
  startup_phase("");  // start-up is over: the steps run under the communicators' deadlines
  trainer.run();
  const GradReducer* reducer = dp_sync ? &dp_sync->reducer() : zero_sync ? &zero_sync->zero().reducer() : nullptr;
  print_summary(job, reducer, zero_sync ? &zero_sync->zero() : nullptr, zero3_sync ? &zero3_sync->zero() : nullptr, pipe);
  world->barrier()->wait();
  return 0;
}

}  // namespace st::runtime
