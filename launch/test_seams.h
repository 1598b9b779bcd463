// The test variables of docs/testing.md ("Hooks for tests"), read from the environment by the CLI
// — the only place that reads them — into the run's seams (runtime/train/train_step.h, TrainSeams):
//   SHARDTRAIN_TEST_INF_STEP=s | s+   rank SHARDTRAIN_TEST_INF_RANK's (default every rank's) first
//                                      gradient becomes +inf at step s (from 1; s+: from s on)
//   SHARDTRAIN_TEST_KILL_STEP=s             rank SHARDTRAIN_TEST_KILL_RANK (default 0) raises SIGKILL on
//                                            itself at step s (from 1), its gradients computed, the
//                                            step not applied; with SHARDTRAIN_TEST_KILL_MARK=FILE only
//                                            while FILE does not exist: it first writes the kill's
//                                            wall-clock time there (ns since the epoch), so a restart
//                                            that runs step s again is not killed (launch/supervise.sh)
//   SHARDTRAIN_TEST_CRASH_BEFORE_COMMIT=1   every rank throws right before a checkpoint's rename
//   SHARDTRAIN_TEST_SKIP_GRAD_COMM=1        the DP / ZeRO reducer skips its collectives
//   SHARDTRAIN_TEST_PREPARE_KILL_SHARDS=n   `prepare --input` raises SIGKILL on itself once its n-th
//                                            shard (train or val) is in place
// A value that is not one of these forms is a UsageError naming the variable.
#pragma once
#include <functional>

#include "runtime/train/train_step.h"

namespace st::launch {

runtime::TrainSeams train_seams_from_environment();
// SHARDTRAIN_TEST_PREPARE_KILL_SHARDS → prepare's after-each-shard hook (empty when unset).
std::function<void()> prepare_shard_hook_from_environment();

}  // namespace st::launch
