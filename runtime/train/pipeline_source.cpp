#include "runtime/train/pipeline_source.h"

#include <algorithm>

#include "ops/elementwise.h"
#include "runtime/nn/dropout_context.h"
#include "runtime/common/timing.h"
#include "runtime/observe/trace.h"
#include "tensor/autograd.h"

namespace st::runtime {
namespace {
// Tag of the one-off shape handshake; micro-batch tags are 2·mb and 2·mb + 1 (MPI guarantees 32767).
constexpr int kShapeTag = 32767;

// The activation shape a stage receives: run the stage's predecessors' layers symbolically is not
// possible, so it is agreed once: every stage forwards a zero micro-batch in eval mode (no
// dropout draw) and sends its output's shape to the next stage.
Shape exchange_shape(StageModel& stage, comm::Communicator& pp, int64_t B, int64_t T, Device device, DType* dtype) {
  NoGradGuard ng;
  const bool was_training = stage.is_training();
  stage.eval();
  Shape in_shape{B, T};
  DType in_dtype = DType::i64;
  if (!stage.is_first()) {
    Tensor meta = Tensor::zeros({5}, DType::i64);
    pp.recv(meta, pp.rank() - 1, kShapeTag)->wait();
    auto v = meta.to_double();
    in_shape = {static_cast<int64_t>(v[0]), static_cast<int64_t>(v[1]), static_cast<int64_t>(v[2])};
    in_dtype = static_cast<DType>(static_cast<int>(v[3]));
  }
  Tensor x = Tensor::zeros(in_shape, in_dtype, device);
  for (auto& l : stage.layers()) x = l->forward(x);
  if (!stage.is_last()) {
    ST_CHECK(x.dim() == 3, ShapeError, "pipeline: stage output " << shape_str(x.shape()) << " is not (B, T, C)");
    std::vector<int64_t> m{x.size(0), x.size(1), x.size(2), static_cast<int64_t>(x.dtype()), 0};
    pp.send(Tensor::from_vector(m, {5}), pp.rank() + 1, kShapeTag)->wait();
  }
  stage.train(was_training);
  *dtype = in_dtype;
  return in_shape;
}
}  // namespace

PipelineGradientSource::PipelineGradientSource(std::shared_ptr<StageModel> stage, std::shared_ptr<const TokenData> data,
                                               BatchLayout layout, Device device,
                                               std::shared_ptr<comm::Communicator> pp_group, Schedule schedule,
                                               bool count_loss)
    : stage_(std::move(stage)), data_(std::move(data)), layout_(layout), device_(device), pp_(std::move(pp_group)),
      count_loss_(count_loss) {
  ST_CHECK(pp_ != nullptr, ValueError, "pipeline: no pp group");
  actions_ = make_schedule(schedule, pp_->rank(), pp_->size(), static_cast<int>(layout_.grad_accum));
}

void PipelineGradientSource::load(StepState& st, int mb) {
  Micro& m = st.mbs[static_cast<size_t>(mb)];
  if (m.batch.inputs.defined()) return;
  const int64_t K = layout_.grad_accum, B = layout_.micro_batch;
  const int64_t first = (layout_.replica * K + mb) * B;
  TokenBatch b = data_->sequences(st.step, layout_.global_batch(), first, B, layout_.seq_len);
  if (device_ != Device::cpu) {
    b.inputs = b.inputs.to(device_);
    b.targets = b.targets.to(device_);
  }
  m.batch = b;
}

void PipelineGradientSource::communicate(StepState& st, size_t i, size_t j) {
  const int prev = pp_->rank() - 1, next = pp_->rank() + 1;
  std::vector<comm::P2POp> sends, recvs;
  for (size_t c = i; c < j; ++c) {
    const PipeAction& a = actions_[c];
    Micro& m = st.mbs[static_cast<size_t>(a.micro)];
    switch (a.op) {
      case PipeOp::SendAct:
        sends.push_back(comm::P2POp::send(m.output.detach().contiguous(), next, 2 * a.micro));
        break;
      case PipeOp::SendGrad:
        sends.push_back(comm::P2POp::send(m.input.grad().contiguous(), prev, 2 * a.micro + 1));
        m.input = Tensor();  // done with this micro-batch's input
        break;
      case PipeOp::RecvAct:
        m.input = Tensor::empty(recv_shape_, act_dtype_, device_);
        recvs.push_back(comm::P2POp::recv(m.input, prev, 2 * a.micro));
        break;
      case PipeOp::RecvGrad:
        m.grad_output = Tensor::empty(m.output.shape(), m.output.dtype(), device_);
        recvs.push_back(comm::P2POp::recv(m.grad_output, next, 2 * a.micro + 1));
        break;
      default: break;
    }
  }
  if (!sends.empty()) st.pending_sends.push_back(pp_->batch_p2p(sends));
  if (!recvs.empty()) {
    trace::Scope ts("recv", "comm");
    const auto t0 = Clock::now();
    pp_->batch_p2p(recvs)->wait();
    stats_.wait_ms += ms_since(t0);
  }
}

void PipelineGradientSource::forward(StepState& st, int mb) {
  trace::Scope ts("forward", "compute", mb);
  load(st, mb);
  Micro& m = st.mbs[static_cast<size_t>(mb)];
  Tensor x;
  if (stage_->is_first()) {
    x = m.batch.inputs;
  } else {
    m.input.requires_grad_(true);
    x = m.input;
  }
  x = stage_->forward_layers(x, 0, stage_->layers().size());
  if (stage_->is_last()) {
    Tensor loss = stage_->loss(x, m.batch.targets);  // () f32, the micro-batch mean
    m.output = st.factor == 1.0 ? loss : ops::scale(loss, st.factor);
    st.losses.push_back(loss.detach());
  } else {
    m.output = x;
  }
  stats_.peak_in_flight = std::max(stats_.peak_in_flight, ++st.in_flight);
  stats_.peak_activation_bytes = std::max(stats_.peak_activation_bytes, static_cast<int64_t>(cpu_bytes_in_use()) -
                                                                            static_cast<int64_t>(st.mem0));
}

void PipelineGradientSource::backward(StepState& st, int mb) {
  trace::Scope ts("backward", "compute", mb);
  Micro& m = st.mbs[static_cast<size_t>(mb)];
  if (stage_->is_last())
    m.output.backward();
  else
    m.output.backward(m.grad_output);
  m.output = Tensor();
  m.grad_output = Tensor();
  m.batch = TokenBatch{};
  --st.in_flight;
}

double PipelineGradientSource::compute_gradients(int64_t step, double loss_scale, GradientSync& sync) {
  // Agreed at the first step, once the optimizer has cast the parameters to the compute dtype.
  if (recv_shape_.empty())
    recv_shape_ = exchange_shape(*stage_, *pp_, layout_.micro_batch, layout_.seq_len, device_, &act_dtype_);
  const int64_t K = layout_.grad_accum, B = layout_.micro_batch;
  StepState st;
  st.step = step;
  st.factor = loss_scale / static_cast<double>(K * layout_.dp);
  st.mbs.resize(static_cast<size_t>(K));
  st.mem0 = cpu_bytes_in_use();
  stats_ = {};
  size_t last_backward = 0;
  for (size_t i = 0; i < actions_.size(); ++i)
    if (actions_[i].op == PipeOp::Backward) last_backward = i;

  for (size_t i = 0; i < actions_.size();) {
    const PipeAction& a = actions_[i];
    if (is_comm(a.op)) {
      size_t j = i;
      while (j < actions_.size() && is_comm(actions_[j].op)) ++j;
      communicate(st, i, j);
      i = j;
      continue;
    }
    const auto t0 = Clock::now();
    DropoutScope dropout_scope(step, (layout_.replica * K + a.micro) * B);  // layout-free masks
    if (a.op == PipeOp::Forward) {
      forward(st, a.micro);
    } else {
      if (i == last_backward) sync.last_backward();
      backward(st, a.micro);
    }
    stats_.compute_ms += ms_since(t0);
    ++i;
  }
  {
    trace::Scope ts("send wait", "comm");
    for (auto& w : st.pending_sends) w->wait();
  }
  if (!stage_->is_last() || !count_loss_) return 0.0;
  double sum = 0;
  for (auto& l : st.losses) sum += l.item();
  return sum / static_cast<double>(K * layout_.dp);
}

}  // namespace st::runtime
