// SIGINT / SIGTERM during `shardtrain train` (Ctrl-C, kill, mpirun passing a signal on, Slurm's
// scancel): the first asks the run to stop (runtime/common/stop_request.h: every rank stops after
// the same step, saves a checkpoint with --save-on-signal 1 and a --checkpoint-dir); a second
// ends the process at once (one line on stderr, exit 128 + the signal). The handler only stores
// into a lock-free atomic and, on the second signal, calls write(2) and _exit(2):
// async-signal-safe. The closing line (stop_line) and the exit code are launch/'s.
// A first signal outside the trainer's step loop (start-up; runtime::stop_armed) ends the process
// at once, quietly, as the default action would: there is nothing to save yet.
// SIGUSR1 / SIGUSR2 count as SIGINT / SIGTERM: launch/mpirun.sh passes a Ctrl-C / SIGTERM on as
// those, which mpirun forwards to every rank at once (its own SIGINT / SIGTERM handling would
// SIGKILL the ranks about 2 s later, too soon for a step and a save).
#pragma once
#include <string>
#include <vector>

#include "runtime/common/stop_request.h"

namespace st::launch {

// The first signal also arms alarm(runtime::stop_grace()): a process that reaches no step boundary
// by then (a rank stuck in a collective whose peer is gone) ends with one line, exit 128 + signal.
// Installs the handlers. `notice`: this process prints the first signal's one-line notice
// (rank 0), on stderr.
void install_stop_signals(bool notice);
// The stop reached its end (the run returned): the grace's alarm is cancelled, and a later signal
// (mpirun ending the job) ends the process without a line.
void end_stop_grace();

// The closing line of a stopped run: "stopped by SIGINT after step 74 of 200; checkpoint
// runs/x/checkpoints/step_00000074 (saved on the signal); resume: <the command line as run, with
// --resume 1>". `ranks`: the job's world size (the resume line names launch/mpirun.sh -n RANKS).
std::string stop_line(const runtime::StopRecord& r, const std::vector<std::string>& args, int ranks, bool gpus,
                      bool has_checkpoint_dir);

// The exit code of a run that stopped on `signal`: alone, 128 + signal (130 SIGINT, 143 SIGTERM),
// as a shell reports a process a signal ended (the run did not reach --steps); a rank of an MPI
// job (`under_mpi`), 0: Open MPI takes a rank's non-zero exit for a failure, aborts the job and
// prints its banners around the stop line; launch/mpirun.sh, which passed the signal on, exits 130
// / 143 itself.
int stop_exit_code(int signal, bool under_mpi);

}  // namespace st::launch
