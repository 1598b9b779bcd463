// The trainer's CUDA-graph path (runtime/train/cuda_graph_step.h): launching a step, reading its
// line when the next one is on its way, and when the host must wait instead. Trainer::run drives
// it; the eager step is in trainer.cpp.
#include <cstdlib>
#include <iostream>
#include <limits>

#include "runtime/train/trainer.h"
#include "tensor/memory_category.h"
#include "tensor/storage.h"

namespace st::runtime {

Trainer::GraphPending Trainer::launch_graph_step() {
  GraphPending p;
  p.t0 = Clock::now();
  StepMetrics& m = p.m;
  m.step = step_ + 1;
  m.lr = schedule_.at(step_);
  const Device device = model_->parameters().front().device();
  if (!graph_) {
    const bool capture = std::getenv("SHARDTRAIN_TEST_GRAPH_STEP_EAGER") == nullptr;
    graph_ = std::make_unique<CudaGraphStep>(cfg_, model_, dynamic_cast<LocalGradientSource&>(*w_.source), *w_.sync,
                                             *opt_, scaler_, std::max(cfg_.steps, step_ + 1), capture);
  }
  const bool replay = graph_->captured();
  if (!replay) reset_memory_peaks(device);
  try {
    graph_->launch(step_, m.lr);
  } catch (const CaptureError& e) {
    // The warm-up (nothing captured or pending yet) read a device value back: this model's step
    // cannot be a graph. It runs eagerly from here on, this step included: the failed warm-up
    // changed nothing the eager step reads (its gradients are cleared first, the read came
    // before the optimizer; the step's code reads nothing after it).
    if (replay || graph_->captured() || graph_->pending() > 0) throw;
    if (rank() == 0) std::cout << "cuda graph: off (" << e.what() << "); the step runs eagerly" << std::endl;
    graph_.reset();
    use_graph_ = false;
    m.loss_scale = scaler_.scale();
    eager_step(m);
    ++step_;
    record_memory(m, device);
    p.m = finish_metrics(m, p.t0, device);
    p.eager = true;
    return p;
  }
  if (!replay) {  // warm-up or capture: allocations happened now; replays allocate nothing
    record_memory(graph_memory_, device);
    graph_memory_.mem_bytes = static_cast<int64_t>(device == Device::cuda ? cuda::device_bytes_peak() : cpu_bytes_peak());
  }
  m.mem_params = graph_memory_.mem_params;
  m.mem_grads = graph_memory_.mem_grads;
  m.mem_optim = graph_memory_.mem_optim;
  m.mem_act_peak = graph_memory_.mem_act_peak;
  m.mem_peak = graph_memory_.mem_peak;
  m.mem_bytes = graph_memory_.mem_bytes;
  ++step_;
  return p;
}

StepMetrics Trainer::complete_graph_step(const GraphPending& p) {
  if (p.eager) return p.m;  // the warm-up's fallback ran it eagerly
  StepMetrics m = p.m;
  const GraphStepReport r = graph_->wait(m.step - 1);
  const auto done = Clock::now();
  graph_->write_back(scaler_, *opt_);
  m.loss = r.loss;
  m.loss_scale = r.loss_scale;
  m.skipped = r.skipped;
  m.grad_norm = r.skipped ? std::numeric_limits<double>::quiet_NaN() : r.grad_norm;
  if (r.skipped)
    nonfinite_.nonfinite(m.step, m.loss, r.found_inf, r.at_floor);
  else
    nonfinite_.finite();
  // with the next step launched before this one was waited for, the time since the previous
  // completion is the step's share of the device's time; else since its own launch
  const auto from = graph_last_done_ > p.t0 ? graph_last_done_ : p.t0;
  graph_last_done_ = done;
  return finish_metrics(m, from, model_->parameters().front().device(), done);
}

bool Trainer::sync_due(int64_t step) const {
  return step == cfg_.steps || (val_data_ && step % eval_interval(cfg_) == 0) ||
         (!cfg_.checkpoint_dir.empty() && cfg_.checkpoint_every > 0 && step % cfg_.checkpoint_every == 0);
}

}  // namespace st::runtime
