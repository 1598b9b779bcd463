// ZeRO-3 (--zero 3, fully sharded, FSDP-style): each DP rank holds 1/dp of every parameter.
//
// Units. A unit is the parameters of one layer of the model (a transformer block; the
// embedding and the head are layers of their own), flattened in registration order into one
// buffer of `numel` elements padded to a multiple of dp: `padded` = ceil(numel/dp)·dp, shard
// S = padded/dp. Rank r holds elements [r·S, (r+1)·S) of it (`values`, (S,), in the compute
// dtype) and the same slice of the unit's gradient (`grad`, (S,)). A parameter named in
// `own_units` (a weight tied between two layers — the GPT's wte — or across pipeline stages) is
// a unit of its own, so the stages holding it cut it alike and its shards sum pairwise
// (Zero3Sync), and a layer that uses another unit's weight gathers that unit too.
//
// Start. The rank never holds a parameter whole: the model is built without its bytes (its
// storages made under Storage::DeferAllocation: names, shapes and modules only), and shard() gives
// each piece its values from a PieceFill — the family's keyed init of just those elements
// (LanguageModel::init_parameter), or a positioned read of just them from a checkpoint or a
// pretrained directory (runtime/parallel/state_io.h, read_part_window). What a rank allocates to
// start is its shards (Σ S_u f32) and the optimizer's state of its pieces; a read holds one piece
// more while it is copied (tests/runtime/train/test_memory.cpp bounds the start's peak).
//
// Optimizer. Rank r's part of parameter k is the contiguous run of its flattened elements that
// falls in [r·S, (r+1)·S): the "piece", a view of `values` named like the parameter (shaped
// (1, len) for a parameter of ≥ 2 dims so the optimizer's weight-decay rule, dims ≥ 2, sees
// what it would see whole; (len) otherwise), whose .grad() is the same view of `grad`. The
// optimizer steps the pieces only (AdamW and its f32 masters are elementwise, so stepping pieces
// is stepping the whole); its state and masters are 1/dp of one process's (+ < dp elements of
// padding per unit, never stepped). A rank whose shard of a parameter is empty leaves it out.
//
// Gathers. The model's tensors are views of the unit's `flat` buffer (padded,) in the compute
// dtype, whose Storage is released (tensor/storage.h) outside use. Before layer i's forward its
// units are all-gathered into `flat` (the next layer's gather is started before layer i runs:
// a nonblocking all_gather that overlaps compute where the backend progresses on its own — NCCL;
// on MPI without a progress thread it completes at the wait), and released right after the
// forward (autograd's saved views keep the Storage object, not its bytes). An identity node on
// the layer's output gathers them again when backward reaches the layer (and starts the gather
// of the layer before it). With recompute the replayed forward runs inside that node's
// downstream recompute node, so it finds them gathered.
//
// Gradients. When every parameter of a unit has its final gradient of the backward pass
// (grad-ready hooks), the gradients are copied into one (padded,) buffer in the comm dtype, freed,
// reduce-scattered (each rank receives the sum of its shard), and the unit's `flat` released. The
// sum is added into `grad` when the next unit's gradients are final (it runs during that unit's
// backward; one in flight) or at finish(). With gradient accumulation every micro-batch gathers the parameters again (they are
// freed between, which is what ZeRO-3 is for) and reduce-scatters its own gradients, which add up
// in the shard: full-size gradients exist only for the unit in backward, never for the model.
//
// Memory per rank (P parameters, dp ranks, U units): Σ S_u ≈ P/dp parameter and gradient
// elements, plus the gathered units (the one running and the one prefetched; a tied unit stays
// gathered from the head's backward to the embedding's), plus one unit's full gradients and their
// comm buffer during its reduce. Checkpoints (gather_full) assemble each unit per tensor kind
// and keep, on the rank holding each parameter's first element, its full tensor: every rank
// writes the parameters it starts, ZeRO-1's format (runtime/parallel/state_sharding.h).
//
// Every rank of `dp` runs the same layers in the same order, so gathers, reduce-scatters and
// the checkpoint gathers are issued in the same order everywhere.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "comm/communicator.h"
#include "runtime/common/named_tensors.h"
#include "runtime/nn/language_model.h"
#include "tensor/tensor.h"

namespace st::runtime {

struct Zero3Stats {
  int64_t gathers = 0;          // unit all-gathers (forward and backward)
  int64_t reduce_scatters = 0;  // unit gradient reduce-scatters
  int64_t bytes_gathered = 0;   // (padded,) bytes received by gathers, compute dtype
  int64_t max_gathered = 0;     // most units gathered at once
};

class Zero3 : public LayerHook {
 public:
  // model: this rank's model (a stage's layers under pp, tp shards under tp), identical in
  // names and shapes on every rank of `dp`, in f32; its tensors' bytes need not exist (never
  // read). comm_dtype: the gradients' reduce-scatter.
  Zero3(const LanguageModel& model, std::shared_ptr<comm::Communicator> dp, std::set<std::string> own_units,
        DType comm_dtype = DType::f32, bool prefetch = true);
  Zero3(const Zero3&) = delete;
  Zero3& operator=(const Zero3&) = delete;

  // Writes into `piece` ((len,) f32 on the run's device) elements [first, first + len) of
  // parameter `name`'s local tensor (its tp shard under tp), flattened row-major.
  using PieceFill = std::function<void(const std::string& name, Tensor& piece, int64_t first)>;
  // This rank's pieces (f32 views of its shards, made on `device` and filled by `fill`), named by
  // parameter, for the optimizer. The model's tensors become views of the released gather buffers
  // (whatever storage they had goes with them).
  NamedTensors shard(const PieceFill& fill, Device device);
  // After the optimizer was built over the pieces (its f32 masters made): the shards and the
  // gather buffers take the compute dtype, and the pieces become views of the shards again.
  void adopt(DType compute);

  // Collective over dp: the full (local: tp-sharded) f32 tensor of every parameter this rank
  // writes (it holds the parameter's first element), assembled from every rank's pieces
  // (name → piece, as shard() names them; a missing name contributes zeros).
  NamedTensors gather_full(const NamedTensors& pieces);
  // Where this rank's piece of a parameter lies in its flattened local tensor: [first, first + len)
  // (len 0: no piece), and that tensor's shape — what a positioned read of the piece needs.
  struct PieceRange {
    int64_t first = 0, len = 0;
  };
  PieceRange piece_range(const std::string& name) const;
  const Shape& local_shape(const std::string& name) const;
  bool has_piece(const std::string& name) const;

  // The step (Zero3Sync): zero the gradient shards; after the last backward, complete them.
  void begin_step();
  void finish();
  // The gradient shard of a parameter that is a unit of its own (tied across stages).
  Tensor unit_grad(const std::string& name) const;

  Tensor forward(size_t i, size_t begin, size_t end, const Tensor& x,
                 const std::function<Tensor(const Tensor&)>& run) override;

  int64_t num_units() const { return static_cast<int64_t>(units_.size()); }
  int64_t shard_numel() const;          // Σ S_u: parameter (and gradient) elements this rank holds
  int64_t largest_unit_padded() const;  // the largest (padded,) gather buffer
  const Zero3Stats& stats() const { return stats_; }

 private:
  struct Param {
    std::string name;
    Tensor p;  // the model's tensor: a view of its unit's flat buffer after shard()
    Shape shape;
    int64_t numel = 0, offset = 0;  // elements; offset in the unit's flat buffer
    int unit = 0;
    int64_t lo = 0, len = 0;  // this rank's piece: elements [lo, lo + len) of the flattened parameter
    Tensor piece;
  };
  struct Unit {
    std::vector<size_t> params;
    int64_t numel = 0, padded = 0, shard = 0;
    Tensor flat;    // (padded,) over the Storage the parameters view; released outside use
    Tensor values;  // (shard,) this rank's slice
    Tensor grad;    // (shard,) its gradient, summed over dp and micro-batches
    comm::WorkPtr gather;
    bool gathered = false;
    int ready = 0, expected = 0;  // grad-ready hooks seen in this backward / parameters needing grad
  };
  struct Pending {
    comm::WorkPtr work;
    Tensor in, out;  // (padded,) and (shard,), comm dtype
    int unit = 0;
  };

  void launch(int u);
  void wait_gathered(int u);
  void release(int u);
  void ensure_layer(size_t i);
  void launch_layer(size_t i);
  void on_ready(int u);
  void reduce(int u);
  void complete_front();
  void bind(size_t k, const Tensor& flat);  // the model's tensor k: a view of `flat`
  int64_t piece_pos(const Param& q) const { return q.offset + q.lo - rank_ * units_[q.unit].shard; }

  std::shared_ptr<comm::Communicator> dp_;
  int rank_ = 0, size_ = 1;
  DType comm_dtype_;
  bool prefetch_;
  std::vector<Param> params_;
  std::unordered_map<std::string, size_t> index_;
  std::vector<Unit> units_;
  std::vector<std::vector<int>> layer_units_;  // per layer: the units its forward reads
  std::vector<std::string> layer_scope_;
  std::deque<Pending> pending_;
  Zero3Stats stats_;
};

}  // namespace st::runtime
