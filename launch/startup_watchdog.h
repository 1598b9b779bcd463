// Start-up under the deadline: from the first line of a command to its first step, every phase —
// MPI start-up (MPI_Init_thread itself blocks while a peer is stopped), the communicators and the
// options' agreement, loading — must end within --timeout-s of its start, or the job ends with one
// line naming the rank that did not arrive:
//   [rank 0] shardtrain: error: start-up: MPI start-up did not complete within --timeout-s 10: rank 2 has not arrived (no sign of life for 9.7 s: stopped?); ranks 0,1,3 waited at MPI start-up
// Before MPI is up the rank and the job come from the launcher's variables (OMPI_COMM_WORLD_RANK /
// PMIX_RANK / PMI_RANK / SLURM_PROCID, the sizes likewise; the job from PMIX_NAMESPACE,
// OMPI_MCA_orte_ess_jobid, SLURM_JOB_ID.SLURM_STEP_ID, else the local launcher's process id).
//
// How the missing rank is found: each rank keeps a marker file in a node-local directory keyed by
// the job (/dev/shm, else $TMPDIR or /tmp: shardtrain-startup-<uid>-<job>/rank<R>) holding the
// phase it is in, and a thread touches it every 0.2 s. At the deadline a rank reads every marker:
// a rank with no marker (never started), one whose marker went stale (> 3 s: the whole process is
// stopped, its thread too) or one a phase behind the others is named. The lowest rank of this node
// that is not named prints the line; every waiting rank then _exits (1), and the launcher ends the
// rest. Ranks on other nodes have no marker here: with ranks on several nodes (the local size
// below the world's), a missing marker names no one; each node's lowest live rank names the
// stale or late ranks of its node, so the node holding the stopped rank names it (a node whose
// ranks are all alive and on time ends the job at twice the deadline, saying the missing rank is
// on another node). A rank that is itself behind leaves it to the others; on one node, every rank
// alive and at the same phase is a slow start (or a collective, which the communicators' own
// deadlines watch), not a missing rank: no line. A rank's marker goes when its start-up ends
// (the directory with the last one; all of it with the rank that printed, or with an error that
// ends the job).
//
// One process (no launcher variables, or a world of one) runs no watchdog: there is no one to wait for.
#pragma once
#include <string>
#include <vector>

namespace st::launch {

// Before MPI_Init: the deadline from --timeout-s in `args` (or --config FILE's timeout-s, else
// `default_s`), the first phase "MPI start-up". No-op for one process.
void start_startup_watchdog(const std::vector<std::string>& args, double default_s);
// This rank reached `phase` (a new deadline from now); "" ends the watch (start-up over).
void startup_watchdog_phase(const std::string& phase);
// Ends the watch; this rank's marker goes (the directory with the last one). whole_job: an error
// being reported, which ends every rank (its own line comes instead of the watchdog's): every
// marker of the job goes, a stopped rank's too.
void stop_startup_watchdog(bool whole_job = false);

}  // namespace st::launch
