#include "runtime/train/pipeline_source.h"

#include <algorithm>

#include "ops/elementwise.h"
#include "ops/step_state.h"
#include "runtime/common/timing.h"
#include "runtime/nn/dropout_context.h"
#include "runtime/observe/trace.h"
#include "runtime/train/fp8_delayed.h"
#include "tensor/autograd.h"

namespace st::runtime {

PipelineGradientSource::PipelineGradientSource(std::shared_ptr<StageModel> stage, std::shared_ptr<const TokenSource> data,
                                               BatchLayout layout, Device device,
                                               std::shared_ptr<comm::Communicator> pp_group, PipelinePlan plan,
                                               bool count_loss)
    : stage_(std::move(stage)), data_(std::move(data)), layout_(layout), device_(device), pp_(std::move(pp_group)),
      plan_(std::move(plan)), chunks_(stage_->chunks()), count_loss_(count_loss) {
  ST_CHECK(pp_ != nullptr, ValueError, "pipeline: no pp group");
  check_batch_layout(layout_);
  const int r = pp_->rank(), p = pp_->size();
  const int64_t K = layout_.grad_accum;
  ST_CHECK(stage_->is_first() == (r == 0) && stage_->is_last() == (r == p - 1), ValueError,
           "pipeline stage " << r << " of " << p << ": its layers do not start / end the model as its place requires");
  ST_CHECK(K <= max_pipeline_micro_batches(chunks_), ValueError,
           "pipeline: " << K << " micro-batches of " << chunks_ << " chunks need tags beyond the "
                        << kPipeShapeTag << " MPI guarantees (at most " << max_pipeline_micro_batches(chunks_) << ")");
  ST_CHECK(plan_.in_flight_bound >= 1, ValueError, "pipeline: in-flight bound " << plan_.in_flight_bound);
  for (size_t i = 0; i < plan_.steps.size(); ++i) {
    const PipeStep& s = plan_.steps[i];
    auto check = [&](const PipeAction& a) {
      ST_CHECK(a.micro >= 0 && a.micro < K && a.chunk >= 0 && a.chunk < chunks_, ValueError,
               "pipeline stage " << r << ": action " << to_string(a) << " outside " << K << " micro-batches × "
                                 << chunks_ << " chunks");
    };
    for (const PipeAction& a : s.comm) check(a);
    if (s.compute) check(*s.compute);
    if (s.compute && s.compute->op == PipeOp::Backward) last_backward_ = i;
  }
}

PipelineGradientSource::Slot& PipelineGradientSource::slot(StepState& st, const PipeAction& a) const {
  return st.slots[static_cast<size_t>(a.micro * chunks_ + a.chunk)];
}

void PipelineGradientSource::update_held(StepState& st, Slot& s) const {
  const bool now = s.input.defined() || s.output.defined() || s.grad_output.defined() || s.batch.inputs.defined();
  if (now != s.held) st.held += now ? 1 : -1;
  s.held = now;
}

void PipelineGradientSource::check_bound(StepState& st, const std::vector<PipeAction>& after) {
  stats_.peak_in_flight = std::max(stats_.peak_in_flight, st.held);
  stats_.peak_activation_bytes = std::max(stats_.peak_activation_bytes, static_cast<int64_t>(cpu_bytes_in_use()) -
                                                                            static_cast<int64_t>(st.mem0));
  if (st.held <= plan_.in_flight_bound) return;
  std::string what;
  for (const PipeAction& a : after) what.append(what.empty() ? "" : " ").append(to_string(a));
  ST_THROW(ValueError, "pipeline stage " << pp_->rank() << " of " << pp_->size() << ": " << st.held
                                           << " (micro-batch, chunk) pairs hold activations after " << what
                                           << ", above the schedule's in-flight bound " << plan_.in_flight_bound);
}

// The input each chunk receives cannot be derived without running its predecessors, so it is
// agreed once: in model-chunk order (chunk c of stage s is model chunk c·p + s) each chunk
// receives its predecessor's output shape, forwards a zero micro-batch in eval mode (no dropout
// draw; delayed FP8 scaling states kept as they were) and sends its own output's shape on. The order is one chain, so blocking sends cannot wait
// in a circle.
void PipelineGradientSource::agree_shapes() {
  NoGradGuard ng;
  const Fp8StateKeeper keep(stage_->fp8_named_states());  // delayed FP8: the zeros' casts record no amax
  const bool was_training = stage_->is_training();
  stage_->eval();
  const int r = pp_->rank(), p = pp_->size();
  for (int c = 0; c < chunks_; ++c) {
    Shape shape{layout_.micro_batch, layout_.seq_len / layout_.cp};  // token ids (B, T/cp): the rank's chunks
    DType dtype = DType::i64;
    if (!first_chunk(c)) {
      Tensor meta = Tensor::zeros({5}, DType::i64);
      pp_->recv(meta, pipe_peer({PipeOp::RecvAct, 0, c}, r, p).stage, kPipeShapeTag)->wait();
      auto v = meta.to_double();
      shape = {static_cast<int64_t>(v[0]), static_cast<int64_t>(v[1]), static_cast<int64_t>(v[2])};
      dtype = static_cast<DType>(static_cast<int>(v[3]));
    }
    in_shape_.push_back(shape);
    in_dtype_.push_back(dtype);
    Tensor x = stage_->forward_chunk(Tensor::zeros(shape, dtype, device_), c);
    if (!last_chunk(c)) {
      ST_CHECK(x.dim() == 3, ShapeError, "pipeline: chunk output " << shape_str(x.shape()) << " is not (B, T, C)");
      std::vector<int64_t> m{x.size(0), x.size(1), x.size(2), static_cast<int64_t>(x.dtype()), 0};
      pp_->send(Tensor::from_vector(m, {5}), pipe_peer({PipeOp::SendAct, 0, c}, r, p).stage, kPipeShapeTag)->wait();
    }
  }
  stage_->train(was_training);
}

void PipelineGradientSource::communicate(StepState& st, const std::vector<PipeAction>& group) {
  const int r = pp_->rank(), p = pp_->size();
  {
    std::vector<comm::P2POp> ops;  // holds the send buffers until the group completed
    for (const PipeAction& a : group) {
      Slot& s = slot(st, a);
      const int peer = pipe_peer(a, r, p).stage, tag = pipe_tag(a, r, p, chunks_);
      switch (a.op) {
        case PipeOp::SendAct: ops.push_back(comm::P2POp::send(s.output.detach().contiguous(), peer, tag)); break;
        case PipeOp::SendGrad: ops.push_back(comm::P2POp::send(s.input.grad().contiguous(), peer, tag)); break;
        case PipeOp::RecvAct:
          s.input = Tensor::empty(in_shape_[static_cast<size_t>(a.chunk)], in_dtype_[static_cast<size_t>(a.chunk)],
                                  device_);
          ops.push_back(comm::P2POp::recv(s.input, peer, tag));
          break;
        case PipeOp::RecvGrad:
          s.grad_output = Tensor::empty(s.output.shape(), s.output.dtype(), device_);
          ops.push_back(comm::P2POp::recv(s.grad_output, peer, tag));
          break;
        default: ST_THROW(ValueError, "pipeline: " << to_string(a) << " in a communication group");
      }
    }
    trace::Scope ts("p2p", "comm");
    const auto t0 = Clock::now();
    pp_->batch_p2p(ops)->wait();  // rendezvous: the sends completed when the peers received
    stats_.wait_ms += ms_since(t0);
  }
  for (const PipeAction& a : group) {
    Slot& s = slot(st, a);
    if (a.op == PipeOp::SendGrad) s.input = Tensor();  // its gradient is delivered: done with this input
    update_held(st, s);
  }
  check_bound(st, group);
}

void PipelineGradientSource::forward(StepState& st, const PipeAction& a) {
  trace::Scope ts("forward", "compute", a.micro);
  Slot& s = slot(st, a);
  const bool first = first_chunk(a.chunk), last = last_chunk(a.chunk);
  if (first || last) {
    const int64_t K = layout_.grad_accum, B = layout_.micro_batch;
    // (B, T) of the replica's micro-batch, cp > 1: this rank's two chunks of each sequence (B, T/cp)
    TokenBatch b = context_shard(layout_, data_->sequences(st.step, layout_.global_batch(),
                                                           (layout_.replica * K + a.micro) * B, B, layout_.seq_len));
    if (device_ != Device::cpu) {
      b.inputs = b.inputs.to(device_);
      b.targets = b.targets.to(device_);
    }
    s.batch = b;
  }
  Tensor x;
  if (first) {
    x = s.batch.inputs;
  } else {
    s.input.requires_grad_(true);
    x = s.input;
  }
  x = stage_->forward_chunk(x, a.chunk);
  if (last) {
    Tensor loss = stage_->loss(x, s.batch.targets);  // () f32, the micro-batch mean
    s.output = ops::mul(loss, st.factor);
    st.losses.narrow(0, a.micro, 1).copy_(loss.detach().reshape({1}));
  } else {
    s.output = x;
  }
  update_held(st, s);
}

void PipelineGradientSource::backward(StepState& st, const PipeAction& a) {
  trace::Scope ts("backward", "compute", a.micro);
  Slot& s = slot(st, a);
  if (last_chunk(a.chunk))
    s.output.backward();
  else
    s.output.backward(s.grad_output);
  s.output = Tensor();
  s.grad_output = Tensor();
  s.batch = TokenBatch{};
  update_held(st, s);
}

void PipelineGradientSource::compute_gradients(const StepContext& ctx, GradientSync& sync) {
  const int64_t step = ctx.step;
  // Agreed at the first step, once the optimizer has cast the parameters to the compute dtype.
  if (in_shape_.empty()) agree_shapes();
  const int64_t K = layout_.grad_accum, B = layout_.micro_batch;
  const bool has_loss = last_chunk(chunks_ - 1);
  StepState st;
  st.step = step;
  st.factor = ctx.loss_factor;
  st.slots.resize(static_cast<size_t>(K * chunks_));
  if (has_loss) st.losses = Tensor::zeros({K}, DType::f32, device_);
  st.mem0 = cpu_bytes_in_use();
  stats_ = {};
  for (size_t i = 0; i < plan_.steps.size(); ++i) {
    const PipeStep& s = plan_.steps[i];
    if (!s.comm.empty()) communicate(st, s.comm);
    if (!s.compute) continue;
    const PipeAction& a = *s.compute;
    const auto t0 = Clock::now();
    {
      DropoutScope dropout_scope(step, (layout_.replica * K + a.micro) * B, ctx.seeds);  // layout-free masks
      if (a.op == PipeOp::Forward) {
        forward(st, a);
      } else {
        if (i == last_backward_) sync.last_backward();
        backward(st, a);
      }
    }
    stats_.compute_ms += ms_since(t0);
    check_bound(st, {a});
  }
  if (!has_loss || !count_loss_) return;
  Tensor state = ctx.state;
  for (int64_t k = 0; k < K; ++k)  // in micro-batch order, as LocalGradientSource
    ops::step_state_add_loss(state, st.losses.narrow(0, k, 1).contiguous());
}

double PipelineGradientSource::evaluate(const TokenSource& val, int64_t batches) {
  if (in_shape_.empty()) agree_shapes();  // before any training step (collective over the stages)
  NoGradGuard ng;
  const Fp8StateKeeper keep(stage_->fp8_named_states());  // delayed FP8: the zeros' casts record no amax
  const bool was_training = stage_->is_training();
  stage_->eval();
  const int r = pp_->rank(), p = pp_->size();
  const int64_t B = layout_.micro_batch, T = layout_.seq_len;
  double sum = 0;
  int local = 0;  // this replica's batch number: the tags' micro-batch
  for (int64_t i = layout_.replica; i < batches; i += layout_.dp, ++local) {
    TokenBatch b;
    if (first_chunk(0) || last_chunk(chunks_ - 1)) {
      b = context_shard(layout_, val.read(i * B, B, T));  // inputs, targets (B, T), cp: (B, T/cp)
      if (device_ != Device::cpu) {
        b.inputs = b.inputs.to(device_);
        b.targets = b.targets.to(device_);
      }
    }
    for (int c = 0; c < chunks_; ++c) {
      Tensor x;
      if (first_chunk(c)) {
        x = b.inputs;
      } else {
        const PipeAction a{PipeOp::RecvAct, local, c};
        x = Tensor::empty(in_shape_[static_cast<size_t>(c)], in_dtype_[static_cast<size_t>(c)], device_);
        trace::Scope ts("eval p2p", "comm");
        pp_->batch_p2p({comm::P2POp::recv(x, pipe_peer(a, r, p).stage, pipe_tag(a, r, p, chunks_))})->wait();
      }
      {
        trace::Scope ts("eval forward", "compute", i);
        x = stage_->forward_chunk(x, c);
        if (last_chunk(c)) sum += stage_->loss(x, b.targets).item();  // () f32, the batch mean
      }
      if (!last_chunk(c)) {
        const PipeAction a{PipeOp::SendAct, local, c};
        trace::Scope ts("eval p2p", "comm");
        pp_->batch_p2p({comm::P2POp::send(x.contiguous(), pipe_peer(a, r, p).stage, pipe_tag(a, r, p, chunks_))})
            ->wait();
      }
    }
  }
  stage_->train(was_training);
  if (!last_chunk(chunks_ - 1) || !count_loss_) return 0.0;
  return sum / static_cast<double>(batches * layout_.cp);  // the cp ranks' means averaged
}

}  // namespace st::runtime
