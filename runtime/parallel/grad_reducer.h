// Data-parallel gradient reducer (DDP-style), fed by the autograd engine's grad-ready hooks; the
// gradient half of ZeRO-1 too (runtime/parallel/zero1.h).
//
// Buckets. Parameters are grouped in reverse registration order (backward produces the last
// layers' gradients first): a small first bucket so communication starts early, then buckets of
// `bucket_bytes`; a bucket holds one dtype and device and, when `segment` is given, one segment
// (ZeRO: one owner). Each parameter's .grad() is a view into its bucket's flat buffer, so the
// engine's += accumulation writes straight into what is communicated (no copy, and gradient
// accumulation over micro-batches needs nothing extra).
//
// Ready order. On the step's last micro-batch (set_sync(true)) a hook marks each parameter ready
// when its gradient is final; a bucket whose parameters are all ready is all-reduced (SUM) — or,
// with reduce_to_segment, reduced to its segment's rank — at once, whether or not an earlier
// bucket is, while backward continues. Every rank of the group launches the buckets in the same
// order because that order is the order of the grad-ready hooks, and the hooks follow the
// engine: the same graph (same model, same ops, same shapes on every rank of a DP group) run by
// the same deterministic engine (nodes by creation order, tensor/autograd.cpp). A rank whose
// graph differs would pair different buckets in one collective; each collective carries its
// bucket's index as comm's caller tag, so with SHARDTRAIN_COMM_DEBUG=1 a mismatch is a CommError
// on every rank (dtype and count alone, which two buckets can share, would not tell). finalize()
// launches what is left, in bucket order (for parameters that backward did not reach, their zero
// gradient; the buckets of launch_in_finalize) and then waits for what is in flight. The trainer
// scales each micro-batch's loss by 1/(global batch), so the SUM is the gradient of the
// global-batch mean.
//
// Progress and waits. A backend that does not progress on its own (MPI:
// Communicator::progresses_on_its_own() false) is polled from each hook (one MPI_Test per bucket
// in flight), which also posts buckets whose staged copies have arrived. NCCL runs on its own
// stream and is not polled; it orders each collective after an event it records on the current
// stream when the bucket is launched, i.e. after the bucket's last gradient kernel: no host
// synchronisation at launch (nor on the MPI backend's pinned staging, comm/README.md). finalize()
// and the wait for a free communication buffer wait with Work::wait_on_stream(): on NCCL the
// current stream waits for the completion event — the cast back and the optimizer's kernels queue
// behind it — and the host goes on; the host sees those Works complete at the next zero_grad()
// (errors and deadlines surface there). On MPI wait_on_stream() is the host wait it was.
//
// Communication dtype. With comm_dtype ≠ the gradient dtype (e.g. bf16 over f32 gradients) a
// bucket is cast into a communication buffer, reduced there and cast back: half the bytes, one
// rounding. There are at most `comm_buffers` such buffers (each the size of the largest bucket,
// in comm_dtype), shared by the buckets in flight: launching a bucket when all are taken first
// waits for the oldest bucket in flight. Beside the gradients the reducer so holds at most
// comm_buffers buckets, never a copy of every gradient.
//
// ZeRO-2 (shard_gradients, with reduce_to_segment): a bucket another rank owns has no buffer
// between steps. Its parameters' .grad() are the engine's own tensors while backward accumulates
// them (with gradient accumulation: full-size until the last micro-batch, whose backward
// communicates); when the bucket is final (launch) its buffer is allocated, the gradients are
// copied in and dropped, and the buffer is freed as soon as the reduce to its owner completes
// (retire). At most kShardWindow such buffers are in flight (launching one more first waits for
// the oldest), so the gradient memory of a rank is its own buckets (≈ 1/dp of the model) plus the
// gradients backward holds for buckets not yet final plus kShardWindow buckets — and after
// finish() its own buckets only.
//
// The buckets are laid out (and their buffers allocated) at the first zero_grad(), in the dtype
// and on the device the parameters have then — the trainer casts them to the compute dtype when
// it is built, after the reducer — and laid out again if that changes.
//
// Test hook (docs/testing.md): SHARDTRAIN_TEST_SKIP_GRAD_COMM=1, read at construction, makes
// every bucket skip its collective and do everything else (the hooks, the casts, the waits and
// the statistics), so that a run's step time without gradient communication can be measured
// against the same run with it (tests/bench/bench_dp_overlap.cpp). Gradients are then local.
#pragma once
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/common/timing.h"
#include "tensor/tensor.h"

namespace st::runtime {

struct ReducerOptions {
  size_t bucket_bytes = 25u << 20;
  size_t first_bucket_bytes = 1u << 20;
  DType comm_dtype = DType::f32;  // f32 | bf16 | f16
  // segment[k] of parameter k (registration order): a bucket never holds two segments. Empty:
  // one segment. ZeRO passes each parameter's owner.
  std::vector<int> segment;
  // ZeRO: segment[k] is the rank of the group that needs parameter k's sum (its owner); each
  // bucket is reduced to that rank (comm reduce: ≤ the bucket's bytes sent per rank, half an
  // all-reduce's) and every other rank keeps its own local gradient in the bucket.
  bool reduce_to_segment = false;
  // Parameters (by name) whose buckets launch only from finalize(), never from the hooks, and
  // hold no other parameters: their gradients need something done between backward and the
  // reduction (ZeRO under a pipeline: weights tied across stages are summed over the stages
  // first, since after a reduce only the owner holds the group's sum).
  std::set<std::string> launch_in_finalize;
  int comm_buffers = 2;  // communication buffers when comm_dtype differs (≥ 1)
  // ZeRO-2 (needs reduce_to_segment): buckets of other segments hold memory only from their
  // launch until their reduce completes (see the top note).
  bool shard_gradients = false;
  // Test seam (TrainSeams::skip_grad_comm): the collectives are skipped, everything else runs (the
  // peer of tests/bench/bench_dp_overlap: exposed communication = step time with − without them).
  bool skip_collectives = false;
};

// ZeRO-2: buckets of other owners in flight at once (their buffers exist only then).
constexpr size_t kShardWindow = 2;

struct ReducerStats {
  int64_t steps = 0;                 // finalize() calls
  int64_t buckets_launched = 0;
  int64_t launched_early = 0;        // launched before the step's last grad-ready hook
  int64_t bytes = 0;                 // bucket bytes communicated (comm dtype); 0 with the skip hook
  int64_t reduces = 0;               // buckets reduced to one rank (reduce_to_segment)
  // time spent in finalize(): launching the rest and waiting — on the host where the backend has
  // no device-side wait (MPI); on NCCL only enqueueing the stream waits
  double wait_ms = 0;
};

// One bucket's launch in the current step (cleared by zero_grad), for tests and the log.
struct BucketLaunch {
  int64_t bucket = 0;
  int64_t hooks_seen = 0;      // grad-ready hooks of this step fired when it launched (incl. its own)
  bool from_finalize = false;  // launched by finalize(), not by a hook
  Clock::time_point at;
};

class GradReducer {
 public:
  GradReducer(std::vector<std::pair<std::string, Tensor>> params, std::shared_ptr<comm::Communicator> group,
              ReducerOptions options = {});
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;
  ~GradReducer();

  // Zeroes every bucket (and so every gradient), re-binds each parameter's grad as a view and
  // clears the launch log. Waits on the host for every collective of the last step first (where
  // their errors and deadlines surface).
  void zero_grad();
  // On: the next backward communicates (the step's last micro-batch). Off: accumulate only.
  void set_sync(bool on);
  // Launches the remaining buckets and waits for all (on NCCL by the current stream: see the top
  // note); afterwards every grad holds the sum — with reduce_to_segment, on its segment's rank.
  void finalize();

  int64_t num_buckets();
  // Parameter names of bucket i, in bucket order (for tests and the log).
  std::vector<std::string> bucket_names(int64_t i);
  // Bucket i's flat gradient buffer (numel,) in the parameters' dtype, and its parameters
  // (indices into the constructor's list) with their offsets in it: ZeRO reuses the buffer to
  // send updated values back after the optimizer step.
  // Under shard_gradients a bucket this rank does not own has no buffer (undefined) outside
  // its reduce.
  const Tensor& bucket_buffer(int64_t i);
  int64_t bucket_numel(int64_t i);
  const std::vector<size_t>& bucket_params(int64_t i);
  int64_t offset_in_bucket(size_t param_index) const { return offsets_.at(param_index); }
  bool skips_comm() const { return skip_comm_; }
  const ReducerOptions& options() const { return options_; }

  const std::vector<BucketLaunch>& launches() const { return launches_; }
  int64_t hooks_seen() const { return hooks_seen_; }  // grad-ready hooks so far in this step
  const ReducerStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  struct Bucket {
    Tensor flat;                 // (numel,) in the parameters' dtype; grads are views of it (undefined: released())
    int64_t numel = 0;
    DType dtype = DType::f32;
    Device device = Device::cpu;
    std::vector<size_t> params;  // indices into params_
    int pending = 0;
    bool launched = false;
    int staging = -1;            // index into staging_ while in flight with a comm dtype cast
    comm::WorkPtr work;
    Clock::time_point t_launch;
    int64_t t_launch_us = 0;     // trace clock
  };
  bool layout_is_current() const;
  void lay_out();  // buckets for the parameters' current dtype and device (no-op when current)
  void on_grad_ready(size_t param_index);
  void launch(size_t i, bool from_finalize);
  int root_of(size_t i) const;       // reduce_to_segment: the rank bucket i is reduced to
  bool holds_sum(size_t i) const;    // this rank receives bucket i's sum
  bool released(size_t i) const;     // shard_gradients and another rank's: no buffer between steps
  void gather_in(size_t i);          // released(i) at launch: allocate, copy the grads in, drop them
  int take_staging();                // a free communication buffer (waits for the oldest bucket if none)
  void poll_in_flight();             // MPI progress; retires what completed
  // After completion, or after its stream wait: cast back, free the buffer, trace; a Work the host
  // has not seen complete goes to unsettled_.
  void retire(size_t i);
  void stream_wait_all();            // every bucket in flight: wait_on_stream, retire
  void wait_all();                   // host: every bucket in flight and every unsettled Work

  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<size_t> bucket_of_;  // param index → bucket index
  std::vector<Shape> shapes_;
  std::vector<int64_t> offsets_;   // param index → offset in its bucket
  std::vector<Bucket> buckets_;
  std::vector<Tensor> staging_;    // comm_buffers × (largest bucket numel,) in comm dtype, when it differs
  std::vector<bool> staging_free_;
  std::deque<size_t> in_flight_;   // bucket indices, in launch order
  std::vector<comm::WorkPtr> unsettled_;  // retired after wait_on_stream, completion not yet seen
  std::vector<bool> ready_;
  std::vector<bool> held_;         // param index → in launch_in_finalize
  std::shared_ptr<comm::Communicator> group_;
  ReducerOptions options_;
  bool sync_ = false;
  bool poll_progress_ = false;     // the backend progresses only inside its calls (MPI)
  bool skip_comm_ = false;         // ReducerOptions::skip_collectives
  int64_t hooks_seen_ = 0;
  std::vector<BucketLaunch> launches_;
  ReducerStats stats_;
  std::shared_ptr<bool> alive_;  // hooks outlive nothing: they check this flag
};

}  // namespace st::runtime
