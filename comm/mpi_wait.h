// MPI helpers shared by both backends and the factory: CHECK_MPI (throws CommError, built on
// ST_CHECK_GEN), and deadline-bounded waits on MPI requests. Nothing in comm/ makes a blocking
// MPI call that could wait on a peer without first proving, within a deadline, that every peer
// reached the same point (see mpi_agree()).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/work.h"
#include "tensor/error.h"

namespace st::comm {

inline bool mpi_ok(int rc) { return rc == MPI_SUCCESS; }
std::string mpi_describe(int rc);  // MPI_Error_string
#define CHECK_MPI(expr) ST_CHECK_GEN(expr, ::st::comm::mpi_ok, ::st::comm::mpi_describe, ::st::CommError)

// Throws CommError unless MPI_Init (or MPI_Init_thread) was called and MPI is not finalized.
void require_mpi(const char* who);

// Polls `req` until it completes or `timeout` passes; then throws TimeoutError naming `what`.
void mpi_wait_deadline(MPI_Request* req, Millis timeout, const std::string& what);

// Deadline-bounded allgather of `mine` (the same length on every rank) over `comm`.
// Debug mode's exchange of collective signatures over `comm` (both backends bootstrap on MPI);
// a timeout marks `state` broken before it propagates.
std::vector<CollectiveSignature> mpi_exchange_signatures(MPI_Comm comm, const CollectiveSignature& mine,
                                                         CommState& state, Millis timeout);

std::vector<int64_t> mpi_allgather_i64(MPI_Comm comm, const std::vector<int64_t>& mine, Millis timeout,
                                       const std::string& what);

// Deadline-bounded barrier over `comm`: after it, a blocking MPI call that every rank makes next
// (MPI_Comm_split, MPI_Comm_split_type) cannot wait on a missing peer.
void mpi_agree(MPI_Comm comm, Millis timeout, const std::string& what);

// MPI datatype for raw transfers of `t`'s elements (f16 / bf16 as 16-bit integers).
MPI_Datatype mpi_raw_type(int dtype);

}  // namespace st::comm
