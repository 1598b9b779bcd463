// Pipeline schedules as data (docs/style.md, rule 4): a pure function turns (stage, stages,
// micro-batches) into the list of actions that stage runs; one executor
// (PipelineGradientSource, runtime/train/pipeline_source.h) runs any list. Tests check the lists without ranks or GPUs, including a simulation of all stages that
// proves the pairing of sends and receives cannot deadlock.
//
// Actions of stage s for micro-batch mb:
//   RecvAct  activation of mb from stage s−1     (not on the first stage)
//   Forward  run the stage's layers on mb
//   SendAct  output of mb to stage s+1           (not on the last stage)
//   RecvGrad gradient of mb's output from s+1    (not on the last stage)
//   Backward backpropagate mb through the stage
//   SendGrad gradient of mb's input to s−1       (not on the first stage)
// Consecutive communication actions form one batch: the executor issues them together as one
// batched send/recv and waits for all of them, so a send and the receive that its peer needs
// back (Megatron's send_forward_recv_backward) are in flight at the same time. Sends complete
// without waiting for the peer (buffered / non-blocking); receives block.
//
// gpipe: all forwards, then all backwards (in reverse micro-batch order).
// 1f1b:  warm-up of min(p − s − 1, m) forwards, then one-forward-one-backward, then cool-down;
//        at most p − s micro-batches are in flight (forwarded, not yet backpropagated) on stage s.
#pragma once
#include <string>
#include <vector>

#include "runtime/common/enum_names.h"

namespace st::runtime {

enum class Schedule { gpipe, one_f_one_b };
template <>
struct EnumNames<Schedule> {
  static constexpr std::array<EnumName<Schedule>, 2> table{{{Schedule::gpipe, "gpipe"}, {Schedule::one_f_one_b, "1f1b"}}};
};

enum class PipeOp { RecvAct, Forward, SendAct, RecvGrad, Backward, SendGrad };

struct PipeAction {
  PipeOp op;
  int micro;
  bool operator==(const PipeAction&) const = default;
};

bool is_comm(PipeOp op);
const char* pipe_op_name(PipeOp op);
std::string to_string(const std::vector<PipeAction>& actions);  // "F0 SA0 F1 ..." for messages

std::vector<PipeAction> gpipe_schedule(int stage, int stages, int micro_batches);
std::vector<PipeAction> one_f_one_b_schedule(int stage, int stages, int micro_batches);
std::vector<PipeAction> make_schedule(Schedule kind, int stage, int stages, int micro_batches);

}  // namespace st::runtime
