// The test variables of docs/testing.md ("Hooks for tests"), read from the environment by the CLI
// — the only place that reads them — into the run's seams (runtime/train/train_step.h, TrainSeams):
//   SHARDTRAIN_TEST_INF_STEP=s | s+   rank SHARDTRAIN_TEST_INF_RANK's (default every rank's) first
//                                      gradient becomes +inf at step s (from 1; s+: from s on)
//   SHARDTRAIN_TEST_CRASH_BEFORE_COMMIT=1   every rank throws right before a checkpoint's rename
//   SHARDTRAIN_TEST_SKIP_GRAD_COMM=1        the DP / ZeRO reducer skips its collectives
// A value that is not one of these forms is a UsageError naming the variable.
#pragma once
#include "runtime/train/train_step.h"

namespace st::launch {

runtime::TrainSeams train_seams_from_environment();

}  // namespace st::launch
