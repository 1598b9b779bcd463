// How an error becomes the job's end: a one-line cause on stderr naming the rank, and the exit
// code (1, or 2 for usage errors); under MPI with several ranks MPI_Abort ends every rank, so
// none waits in a collective for one that left.
//
// Printed once: an error every rank meets alike (a bad flag, a grid that does not divide the
// world, a --checkpoint-dir the run refuses — each rank parses the same options, and rank 0's
// decisions are broadcast) would otherwise print once per rank. So before printing, a failing
// rank takes part in an agreement over a communicator of its own (duplicated from the world at
// start, so it never meets another collective): the hashes of every rank's cause, gathered
// without blocking and waited for at most kAgreeSeconds. When every rank failed with the same
// cause, rank 0 prints it and aborts the job; the others wait for that. When the causes differ,
// or some rank did not fail (its error is its own: a file only it cannot read, a timeout naming
// a peer), each failing rank prints its own line.
#pragma once
#include <string>

#include "comm/deadline_diagnosis.h"

namespace st::launch {

// How long a failing rank waits for the others to fail alike before it prints its own line.
constexpr double kAgreeSeconds = 3.0;

// After MPI_Init (collective over the world: every rank calls it); before it, or without MPI,
// report_error prints on every rank.
void prepare_error_agreement();
// Before MPI_Finalize.
void release_error_agreement();
// Prints `what` (newlines become spaces) as "[rank R] shardtrain: error: what" where this rank
// should, and returns `code` (or does not return: MPI_Abort).
int report_error(const std::string& what, int code);
// A deadline (comm/deadline_diagnosis.h): the rank the diagnosis names as reporter prints its
// line and aborts the job at once; every other rank keeps answering its peers' questions (so the
// reporter sees where it timed out) for the error's grace period, then reports itself.
int report_deadline(const comm::DeadlineError& e);

}  // namespace st::launch
