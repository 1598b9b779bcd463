// `shardtrain train` under mpirun / srun: the DP × TP × PP layout of DESIGN.md's step.
//
// Every rank builds the same model from the same seed (or the same checkpoint), then keeps its
// part: with pp > 1 the stage's slice of layers (runtime/stage_model.h, split by --partition),
// driven by a pipeline schedule (runtime/pipeline_source.h); with dp > 1 a GradReducer over its
// DP group all-reduces bucketed gradients during the last micro-batch's backward. Weights tied
// across stages (the GPT's wte in the first and the last stage) have their two gradients summed
// over a two-rank group after the reducer. The trainer's scalar reductions run over the world
// (losses: only the ranks that own a share add one) and over the model-parallel group (the
// squared gradient norm: the ranks of one DP replica, each parameter counted once).
// Checkpoints hold full tensors by name, gathered onto rank 0, so a run resumes under any layout.
#pragma once
#include "runtime/train_config.h"

namespace st::runtime {

// Collective over MPI_COMM_WORLD (MPI already initialised). One rank: the plain Trainer.
int run_parallel_training(const TrainConfig& cfg);

}  // namespace st::runtime
