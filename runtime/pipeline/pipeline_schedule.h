// Pipeline schedules as data (docs/style.md, rule 4): a pure function turns (stage, stages,
// micro-batches, chunks) into the list of steps that stage runs; one executor
// (PipelineGradientSource, runtime/train/pipeline_source.h) runs any list. Tests check the lists
// without ranks or GPUs, including a simulation of all stages under rendezvous semantics (a send
// completes only when its peer's receive is posted, NCCL's and SHARDTRAIN_P2P=strict's rule) that
// proves the schedules cannot deadlock.
//
// A stage holds `chunks` (v) pieces of the model: v = 1 for GPipe and 1F1B; for interleaved 1F1B
// the model is cut into p·v chunks and stage s holds chunks s, s + p, …, s + (v−1)·p (Megatron's
// layout), so activations go s → s+1 and from stage p−1's chunk c to stage 0's chunk c+1.
// Actions of stage s on (micro-batch mb, local chunk c):
//   RecvAct  activation of (mb, c) from the previous model chunk  (not on model chunk 0)
//   Forward  run chunk c's layers on mb
//   SendAct  output of (mb, c) to the next model chunk            (not on the last model chunk)
//   RecvGrad gradient of (mb, c)'s output from the next chunk      (not on the last model chunk)
//   Backward backpropagate mb through chunk c
//   SendGrad gradient of (mb, c)'s input to the previous chunk     (not on model chunk 0)
//
// A step is one communication group and then at most one compute action: the executor posts ALL
// of the group's sends and receives as ONE batch_p2p (NCCL's group call, Megatron's
// batch_isend_irecv), waits for the whole group, drops the send buffers, then computes. So the
// send a stage owes its peer and the receive it needs back are in flight together (1F1B steady
// state: stage s's group {send act k+1, recv grad k} meets stage s+1's {send grad k, recv act k+1}).
// Within a group activations come before gradients, and on every channel (from → to) the
// sender's sends and the receiver's receives are the same sequence (the simulation checks it):
// messages to one peer match in issue order, as NCCL and strict MPI require.
//
// gpipe:       all forwards, then all backwards (in reverse micro-batch order); m in flight.
// 1f1b:        warm-up of min(p − s − 1, m) forwards, then one-forward-one-backward, then
//              cool-down; at most min(p − s, m) micro-batches in flight on stage s.
// interleaved: Megatron's interleaved 1F1B over (micro-batch, chunk) pairs (m a multiple of p):
//              forwards in groups of p micro-batches through chunk 0, 1, …, v−1; warm-up of
//              min(2(p − s − 1) + (v − 1)·p, m·v) forwards, steady 1F1B, cool-down. Bubble
//              (p − 1)/(v·m) of the compute time instead of 1F1B's (p − 1)/m.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "runtime/common/enum_names.h"

namespace st::runtime {

enum class Schedule { gpipe, one_f_one_b, interleaved };
template <>
struct EnumNames<Schedule> {
  static constexpr std::array<EnumName<Schedule>, 3> table{
      {{Schedule::gpipe, "gpipe"}, {Schedule::one_f_one_b, "1f1b"}, {Schedule::interleaved, "interleaved"}}};
};

enum class PipeOp { RecvAct, Forward, SendAct, RecvGrad, Backward, SendGrad };

struct PipeAction {
  PipeOp op;
  int micro;
  int chunk = 0;  // the stage's local chunk 0 … v−1 (model chunk chunk·p + stage)
  bool operator==(const PipeAction&) const = default;
};

// One step: the communication group (posted as one batch_p2p and waited for), then the compute
// action (Forward or Backward; none only for a stage's final group).
struct PipeStep {
  std::vector<PipeAction> comm;
  std::optional<PipeAction> compute;
};

// A stage's schedule: its steps and the most (micro-batch, chunk) pairs whose activations it
// holds at once (a pair is held from its first action to its last: RecvAct or Forward to
// SendGrad or Backward), which the executor asserts.
struct PipelinePlan {
  std::vector<PipeStep> steps;
  int in_flight_bound = 0;
};

struct PipePeer {
  int stage;
  int chunk;
};

bool is_comm(PipeOp op);
bool is_send(PipeOp op);
const char* pipe_op_name(PipeOp op);
// "F0 [SA0 RG0] B0 ..." (chunk c > 0 written as F0.1) for messages and tests.
std::string to_string(const PipeAction& a);
std::string to_string(const std::vector<PipeStep>& steps);

// The steps of `stage`; chunks must be 1 for gpipe / 1f1b and ≥ 2 for interleaved, which needs
// micro_batches to be a multiple of stages.
std::vector<PipeStep> make_schedule(Schedule kind, int stage, int stages, int micro_batches, int chunks = 1);
// The bound the schedule guarantees, in closed form: gpipe m, 1f1b min(p − s, m), interleaved
// min(2(p − s − 1) + (v − 1)·p + 1, m·v) (chunk activations, each 1/v of the stage's layers).
int in_flight_bound(Schedule kind, int stage, int stages, int micro_batches, int chunks = 1);
// The same bound counted on a step list (the tests check both agree).
int max_in_flight(const std::vector<PipeStep>& steps);
PipelinePlan make_plan(Schedule kind, int stage, int stages, int micro_batches, int chunks = 1);

// Whom a communication action of `stage` talks to (stage and local chunk of the peer).
PipePeer pipe_peer(const PipeAction& a, int stage, int stages);
// Message tags, the same on both ends: 2·(micro·v + receiving chunk) + (gradient ? 1 : 0). The
// shape handshake uses kPipeShapeTag, the top of the tag space MPI guarantees (MPI_TAG_UB ≥ 32767,
// checked by comm/), so a step's tags fit when m·v ≤ max_pipeline_micro_batches(v)·v.
constexpr int kPipeShapeTag = 32767;
int pipe_tag(const PipeAction& a, int stage, int stages, int chunks);
// The most micro-batches per step whose tags stay below kPipeShapeTag: ⌊32767 / (2v)⌋.
int max_pipeline_micro_batches(int chunks);

}  // namespace st::runtime
