#include "runtime/pipeline/pipeline_schedule.h"

#include <algorithm>
#include <sstream>

#include "tensor/error.h"

namespace st::runtime {

bool is_comm(PipeOp op) { return op != PipeOp::Forward && op != PipeOp::Backward; }

const char* pipe_op_name(PipeOp op) {
  switch (op) {
    case PipeOp::RecvAct: return "RA";
    case PipeOp::Forward: return "F";
    case PipeOp::SendAct: return "SA";
    case PipeOp::RecvGrad: return "RG";
    case PipeOp::Backward: return "B";
    case PipeOp::SendGrad: return "SG";
  }
  return "?";
}

std::string to_string(const std::vector<PipeAction>& actions) {
  std::ostringstream o;
  for (size_t i = 0; i < actions.size(); ++i) o << (i ? " " : "") << pipe_op_name(actions[i].op) << actions[i].micro;
  return o.str();
}

namespace {

void check_args(int stage, int stages, int m) {
  if (stages < 1 || stage < 0 || stage >= stages || m < 1)
    ST_THROW(ValueError, "pipeline schedule: stage " << stage << " of " << stages << " with " << m
                                                     << " micro-batches is not valid");
}

struct Builder {
  int stage, stages;
  std::vector<PipeAction> out;
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
  void recv_act(int mb) {
    if (!first()) out.push_back({PipeOp::RecvAct, mb});
  }
  void forward(int mb) { out.push_back({PipeOp::Forward, mb}); }
  void send_act(int mb) {
    if (!last()) out.push_back({PipeOp::SendAct, mb});
  }
  void recv_grad(int mb) {
    if (!last()) out.push_back({PipeOp::RecvGrad, mb});
  }
  void backward(int mb) { out.push_back({PipeOp::Backward, mb}); }
  void send_grad(int mb) {
    if (!first()) out.push_back({PipeOp::SendGrad, mb});
  }
};

}  // namespace

std::vector<PipeAction> gpipe_schedule(int stage, int stages, int m) {
  check_args(stage, stages, m);
  Builder b{stage, stages, {}};
  for (int mb = 0; mb < m; ++mb) {
    b.recv_act(mb);
    b.forward(mb);
    b.send_act(mb);
  }
  for (int mb = m - 1; mb >= 0; --mb) {
    b.recv_grad(mb);
    b.backward(mb);
    b.send_grad(mb);
  }
  return b.out;
}

std::vector<PipeAction> one_f_one_b_schedule(int stage, int stages, int m) {
  check_args(stage, stages, m);
  Builder b{stage, stages, {}};
  const int warmup = std::min(stages - stage - 1, m);
  const int steady = m - warmup;
  int next_f = 0, next_b = 0;
  for (int i = 0; i < warmup; ++i) {
    b.recv_act(next_f);
    b.forward(next_f);
    b.send_act(next_f);
    ++next_f;
  }
  if (steady > 0) b.recv_act(next_f);
  for (int i = 0; i < steady; ++i) {
    b.forward(next_f);
    // send this output and receive the oldest in-flight micro-batch's gradient together
    b.send_act(next_f);
    ++next_f;
    b.recv_grad(next_b);
    b.backward(next_b);
    // send the input gradient and receive the next activation together
    b.send_grad(next_b);
    ++next_b;
    if (i + 1 < steady) b.recv_act(next_f);
  }
  while (next_b < m) {
    b.recv_grad(next_b);
    b.backward(next_b);
    b.send_grad(next_b);
    ++next_b;
  }
  return b.out;
}

std::vector<PipeAction> make_schedule(Schedule kind, int stage, int stages, int m) {
  switch (kind) {
    case Schedule::gpipe: return gpipe_schedule(stage, stages, m);
    case Schedule::one_f_one_b: return one_f_one_b_schedule(stage, stages, m);
  }
  ST_THROW(ValueError, "pipeline schedule " << static_cast<int>(kind) << " is not known");
}

}  // namespace st::runtime
