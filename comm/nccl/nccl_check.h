// CHECK_NCCL on ST_CHECK_GEN (throws CommError with the expression, file and line), and the
// poll that waits for a non-blocking NCCL communicator to leave ncclInProgress within a deadline.
#pragma once
#include <nccl.h>

#include <string>

#include "comm/comm_state.h"
#include "tensor/error.h"

namespace st::comm {

// Non-blocking communicators (config.blocking = 0) may answer ncclInProgress: the call was
// accepted and finishes in the background; nccl_wait_ready() then polls for its outcome.
inline bool nccl_ok(ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; }
inline const char* nccl_describe(ncclResult_t r) { return ncclGetErrorString(r); }
#define CHECK_NCCL(expr) ST_CHECK_GEN(expr, ::st::comm::nccl_ok, ::st::comm::nccl_describe, ::st::CommError)

// Polls ncclCommGetAsyncError until the communicator is no longer in progress. Throws CommError
// on an asynchronous error, TimeoutError (naming `what`) after `timeout`. Returns after one query
// when the communicator is already ready.
void nccl_wait_ready(ncclComm_t comm, Millis timeout, const std::string& what);
// One query, no throw: true when the communicator is ready (ncclSuccess, no asynchronous error).
// The per-call fast path: callers build nccl_wait_ready's message only when this says false.
bool nccl_ready_now(ncclComm_t comm);

}  // namespace st::comm
