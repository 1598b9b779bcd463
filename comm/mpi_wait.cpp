// Deadline-bounded MPI waits (see mpi_wait.h).
#include "comm/mpi_wait.h"

#include <chrono>
#include <cstdio>
#include <iomanip>
#include <memory>
#include <sstream>

#include "comm/keep_alive.h"
#include "comm/poll.h"
#include "comm/poll_hooks.h"
#include "comm/wait_state.h"
#include "tensor/dtype.h"

namespace st::comm {

std::string mpi_describe(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, static_cast<size_t>(len));
}

void throw_mpi_error(int rc, const char* call, const std::string& where, const char* file, int line) {
  std::string fn(call);
  fn = fn.substr(0, fn.find('('));
  std::ostringstream os;
  os << "comm error: " << where << ": " << fn << " failed: " << mpi_describe(rc) << " (" << file << ":" << line << ")";
  throw CommError(os.str());
}

MPI_Comm mpi_errors_return(MPI_Comm comm, const std::string& where) {
  CHECK_MPI(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), where);
  return comm;
}

ErrorsReturnScope::ErrorsReturnScope(MPI_Comm comm) : comm_(comm) {
  // These calls on the caller's communicator cannot fail short of an invalid handle.
  CHECK_MPI(MPI_Comm_get_errhandler(comm_, &saved_), "saving the caller's MPI error handler");
  CHECK_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "setting MPI_ERRORS_RETURN");
}

ErrorsReturnScope::~ErrorsReturnScope() {
  // A destructor cannot throw: a failure here would leave MPI_ERRORS_RETURN in place, which only
  // makes later errors on the caller's communicator return instead of abort.
  if (MPI_Comm_set_errhandler(comm_, saved_) != MPI_SUCCESS)
    std::fprintf(stderr, "shardtrain: could not restore the MPI error handler\n");
  MPI_Errhandler_free(&saved_);
}

void require_mpi(const char* who) {
  int init = 0, fin = 0;
  CHECK_MPI(MPI_Initialized(&init), who);
  CHECK_MPI(MPI_Finalized(&fin), who);
  ST_CHECK(init && !fin, CommError, who << ": MPI is not initialised (call MPI_Init_thread first) or already finalised");
}

void mpi_wait_deadline(MPI_Request* req, Millis timeout, const std::string& what) {
  WaitingScope waiting(&what);
  const bool done = poll_until(std::chrono::steady_clock::now() + timeout, [&] {
    int flag = 0;
    CHECK_MPI(MPI_Test(req, &flag, MPI_STATUS_IGNORE), what);
    if (!flag) run_poll_hooks();
    return flag != 0;
  });
  if (done) return;
  std::ostringstream os;
  os << "comm timeout: " << what << " did not complete within " << std::fixed << std::setprecision(1)
     << std::chrono::duration<double>(timeout).count() << " s (a peer is dead or stuck)";
  throw TimeoutError(os.str());
}

std::vector<int64_t> mpi_allgather_i64(MPI_Comm comm, const std::vector<int64_t>& mine, Millis timeout,
                                       const std::string& what) {
  int size = 0;
  CHECK_MPI(MPI_Comm_size(comm, &size), what);
  // Both buffers outlive a timed-out request (MPI cannot cancel a collective).
  struct Buffers {
    std::vector<int64_t> send, recv;
  };
  auto b = std::make_shared<Buffers>();
  b->send = mine;
  b->recv.resize(mine.size() * static_cast<size_t>(size));
  MPI_Request req;
  CHECK_MPI(MPI_Iallgather(b->send.data(), static_cast<int>(mine.size()), MPI_INT64_T, b->recv.data(),
                           static_cast<int>(mine.size()), MPI_INT64_T, comm, &req),
            what);
  try {
    mpi_wait_deadline(&req, timeout, what);
  } catch (const TimeoutError&) {
    keep_alive_forever(b);
    throw;
  }
  return b->recv;
}

void mpi_agree(MPI_Comm comm, Millis timeout, const std::string& what) {
  MPI_Request req;
  CHECK_MPI(MPI_Ibarrier(comm, &req), what);
  mpi_wait_deadline(&req, timeout, what);
}

MPI_Datatype mpi_raw_type(int dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::f32: return MPI_FLOAT;
    case DType::f16:
    case DType::bf16: return MPI_UINT16_T;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::f8e4m3:
    case DType::f8e5m2: break;  // fp8 tensors are not communicated (yet)
  }
  ST_THROW(DTypeError, "comm: no MPI type for dtype " << dtype);
}

std::vector<CollectiveSignature> mpi_exchange_signatures(MPI_Comm comm, const CollectiveSignature& mine,
                                                         CommState& state, Millis timeout) {
  std::vector<int64_t> flat{mine.op, mine.dtype, mine.count, mine.arg, mine.root, mine.tag, mine.seq};
  static_assert(kSignatureFields == 7, "every field of CollectiveSignature is exchanged");
  std::vector<int64_t> all;
  try {
    all = mpi_allgather_i64(comm, flat, timeout, state.where() + ", debug signature exchange");
  } catch (const TimeoutError& e) {
    state.mark_broken(e.what());
    throw;
  }
  const size_t k = kSignatureFields;
  std::vector<CollectiveSignature> out(all.size() / k);
  for (size_t r = 0; r < out.size(); ++r) {
    const int64_t* f = all.data() + k * r;
    out[r] = {f[0], f[1], f[2], f[3], f[4], f[5], f[6]};
  }
  return out;
}

}  // namespace st::comm
