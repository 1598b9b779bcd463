// MPI helpers shared by both backends and the factory: CHECK_MPI (throws CommError naming the
// cause), MPI_ERRORS_RETURN on the communicators comm/ uses, and deadline-bounded waits on MPI
// requests. Nothing in comm/ makes a blocking
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

std::string mpi_describe(int rc);  // MPI_Error_string, e.g. "MPI_ERR_TRUNCATE: message truncated"
// Every MPI return code in comm/ goes through CHECK_MPI or CHECK_MPI_RC. `where` (evaluated only
// on failure) names the context: rank, group, op, and peer / tag where known. Throws CommError
//   "comm error: <where>: MPI_Irecv failed: MPI_ERR_TRUNCATE: message truncated (file:line)".
// The calls only return an error code when the communicator's error handler is
// MPI_ERRORS_RETURN: every MPI_Comm comm/ creates gets it (mpi_errors_return), and calls on a
// caller's communicator (MPI_COMM_WORLD) run inside an ErrorsReturnScope. (Destructors, which
// cannot throw, ignore the codes of MPI_Comm_free / MPI_Request_free / MPI_Finalized.)
[[noreturn]] void throw_mpi_error(int rc, const char* call, const std::string& where, const char* file, int line);
// `call` is the MPI call's text; the message names the function (up to its '(').
#define CHECK_MPI_RC(rc, call, where)                                                              \
  do {                                                                                             \
    const int st_mpi_rc_ = (rc);                                                                   \
    if (st_mpi_rc_ != MPI_SUCCESS) ::st::comm::throw_mpi_error(st_mpi_rc_, call, (where), __FILE__, __LINE__); \
  } while (0)
#define CHECK_MPI(expr, where) CHECK_MPI_RC((expr), #expr, where)

// Sets MPI_ERRORS_RETURN on a communicator comm/ just created (a dup or split) and returns it.
MPI_Comm mpi_errors_return(MPI_Comm comm, const std::string& where);

// For its lifetime, errors on `comm` (one the caller owns, e.g. MPI_COMM_WORLD, whose handler is
// MPI_ERRORS_ARE_FATAL) return instead of ending the job; the caller's handler is restored after.
class ErrorsReturnScope {
 public:
  explicit ErrorsReturnScope(MPI_Comm comm);
  ~ErrorsReturnScope();
  ErrorsReturnScope(const ErrorsReturnScope&) = delete;
  ErrorsReturnScope& operator=(const ErrorsReturnScope&) = delete;

 private:
  MPI_Comm comm_;
  MPI_Errhandler saved_ = MPI_ERRHANDLER_NULL;
};

// Throws CommError unless MPI_Init (or MPI_Init_thread) was called and MPI is not finalized.
void require_mpi(const char* who);

// Polls `req` until it completes or `timeout` passes; then throws TimeoutError naming `what`.
// Runs the poll hooks meanwhile (this rank answers side-channel queries while it waits).
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
