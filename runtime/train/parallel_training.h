// `shardtrain train` under mpirun / srun: the DP × CP × TP × PP layout of docs/design.md's step.
//
// Every rank plans the same model (the same config and description, from the options or the
// checkpoint) and builds only its part: its stage's layers, its tp shards, each parameter drawn
// from the stream keyed by its name (so the numbers are those of one process). Then one axis at
// a time (each a function in parallel_training.cpp adding to the Trainer's wiring before the
// Trainer is built):
//   pipeline     pp > 1: the stage's slice of layers (runtime/pipeline/stage_model.h, split by
//                --partition from the description), driven by a schedule (runtime/train/pipeline_source.h)
//   context par. cp > 1: the model on this rank's two chunks of every sequence, its attention a
//                ring over the cp group (positions global); the weights replicated over cp, so
//                the gradient all-reduce runs over dp × cp, the norm and the checkpoints count cp
//                rank 0; refused with pp, ZeRO, sequence parallelism, dropout, fp8
//   tensor par.  tp > 1: the family's tensor-parallel model; replicated tensors counted once
//   ZeRO-1/2     --zero 1|2, dp > 1: each DP rank's optimizer owns a shard; gradient buckets (never
//                two owners') reduced to their owner during the last backward, updated values
//                broadcast back; --zero 2 frees the buckets of other owners once reduced
//   data par.    dp · cp > 1 otherwise: a GradReducer all-reduces bucketed gradients over dp × cp
//                during the last micro-batch's backward, in the order they become ready
//   tied weights the GPT's wte in the first and the last stage: the two gradients summed over a
//                two-rank group after the DP all-reduce, under ZeRO before the reduce to the owner
// The trainer's scalar reductions run over the world (losses: only the ranks that own a share
// add one) and over the ranks of one DP replica (the squared gradient norm, each parameter
// counted once). Checkpoints hold full tensors by name, each written once by a rank that holds
// it (runtime/parallel/state_sharding.h), so a run resumes under any layout.
#pragma once
#include "runtime/setup/train_config.h"
#include "runtime/train/train_step.h"

namespace st::runtime {

// Collective over MPI_COMM_WORLD (MPI already initialised). One rank: the plain Trainer. `seams`:
// the step's test seams (tests, and launch/'s documented test variables).
int run_parallel_training(const TrainConfig& cfg, const TrainSeams& seams = {});

}  // namespace st::runtime
