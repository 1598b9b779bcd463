// Data-parallel gradient reducer (DDP-style), fed by the autograd engine's grad-ready hooks.
//
// Parameters are grouped into buckets in reverse registration order (backward produces the last
// layers' gradients first): a small first bucket so communication starts early, then buckets of
// `bucket_bytes`. Each parameter's .grad() is a view into its bucket's flat buffer, so the
// engine's += accumulation writes straight into what is communicated (no copy, and gradient
// accumulation over micro-batches needs nothing extra).
//
// On the step's last micro-batch (set_sync(true)) a hook marks each parameter ready when its
// gradient is final; a bucket whose parameters are all ready is all-reduced (SUM) at once, in
// bucket order on every rank, while backward continues. finalize() launches what is left (for
// parameters that backward did not reach, their zero gradient) and waits for the buckets still
// in flight. The trainer scales each micro-batch's loss by 1/(global batch), so the SUM is the
// gradient of the global-batch mean.
//
// The buckets are laid out (and their buffers allocated) at the first zero_grad(), in the dtype
// and on the device the parameters have then — the trainer casts them to the compute dtype when
// it is built, after the reducer — and laid out again if that changes.
//
// With comm_dtype ≠ the gradient dtype (e.g. bf16 over f32 gradients) a bucket is cast into a
// communication buffer, reduced there, and cast back: half the bytes, one rounding.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace st::runtime {

struct ReducerOptions {
  size_t bucket_bytes = 25u << 20;
  size_t first_bucket_bytes = 1u << 20;
  DType comm_dtype = DType::f32;  // f32 | bf16 | f16
};

struct ReducerStats {
  int64_t buckets_launched = 0;
  int64_t bytes = 0;               // bytes communicated (comm dtype)
  double comm_ms = 0;              // sum over buckets of launch → completion seen
  double exposed_ms = 0;           // time finalize() spent waiting (communication not hidden)
};

class GradReducer {
 public:
  GradReducer(std::vector<std::pair<std::string, Tensor>> params, std::shared_ptr<comm::Communicator> group,
              ReducerOptions options = {});
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;
  ~GradReducer();

  // Zeroes every bucket (and so every gradient) and re-binds each parameter's grad as a view.
  void zero_grad();
  // On: the next backward communicates (the step's last micro-batch). Off: accumulate only.
  void set_sync(bool on);
  // Launches the remaining buckets and waits for all; afterwards every grad holds the sum.
  void finalize();

  int64_t num_buckets();
  // Parameter names of bucket i, in bucket order (for tests and the log).
  std::vector<std::string> bucket_names(int64_t i);
  const ReducerStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  struct Bucket {
    Tensor flat;       // (numel,) in the parameters' dtype; grads are views of it
    Tensor comm_buf;   // (numel,) in comm dtype when it differs, else undefined
    std::vector<size_t> params;  // indices into params_
    int pending = 0;
    bool launched = false;
    comm::WorkPtr work;
    std::chrono::steady_clock::time_point t_launch;
    bool timed = false;
  };
  bool layout_is_current() const;
  void lay_out();  // buckets for the parameters' current dtype and device (no-op when current)
  void on_grad_ready(size_t param_index);
  void launch_ready_in_order();
  void launch(Bucket& b);
  void poll_in_flight();
  void complete(Bucket& b);
  void note_done(Bucket& b);  // statistics and a trace event for a finished all-reduce

  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<size_t> bucket_of_;  // param index → bucket index
  std::vector<Shape> shapes_;
  std::vector<int64_t> offsets_;   // param index → offset in its bucket
  std::vector<Bucket> buckets_;
  std::vector<bool> ready_;
  std::shared_ptr<comm::Communicator> group_;
  ReducerOptions options_;
  bool sync_ = false;
  size_t next_launch_ = 0;
  ReducerStats stats_;
  std::shared_ptr<bool> alive_;  // hooks outlive nothing: they check this flag
};

}  // namespace st::runtime
