// Typed errors of the whole runtime. Library code throws these; only launch/ turns one into a
// one-line cause and ends the job (an exit() in a library leaves the other ranks hung).
//
// CHECK_* helpers for CUDA, cuBLAS, cuDNN, NCCL and MPI are all built on ST_CHECK_GEN, which
// carries the expression text, file and line into the message.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace st {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class ShapeError : public Error { using Error::Error; };     // shapes do not fit the op
class DTypeError : public Error { using Error::Error; };     // unsupported or mismatched dtype
class DeviceError : public Error { using Error::Error; };    // wrong device, or backend not built
class ValueError : public Error { using Error::Error; };     // bad argument value
class AutogradError : public Error { using Error::Error; };  // misuse of backward / graph
class IOError : public Error { using Error::Error; };        // files: missing, malformed, short
class CudaError : public Error { using Error::Error; };       // CUDA runtime / cuBLAS / cuDNN
class CaptureError : public Error { using Error::Error; };    // a host read inside a CUDA graph capture
class OutOfMemoryError : public Error { using Error::Error; };
class CommError : public Error { using Error::Error; };      // MPI / NCCL failures
class TimeoutError : public CommError { using CommError::CommError; };  // a deadline passed

// Builds "what (at file:line)" messages; usage: ST_THROW(ShapeError, "matmul: " << a << " vs " << b)
#define ST_THROW(Type, msg_stream)                     \
  do {                                                 \
    std::ostringstream st_msg_;                        \
    st_msg_ << msg_stream;                             \
    throw Type(st_msg_.str());                         \
  } while (0)

#define ST_CHECK(cond, Type, msg_stream) \
  do {                                   \
    if (!(cond)) ST_THROW(Type, msg_stream); \
  } while (0)

// Generic library-call check: `ok` tests the status, `describe` turns it into text.
#define ST_CHECK_GEN(expr, ok, describe, Type)                                              \
  do {                                                                                      \
    auto st_status_ = (expr);                                                               \
    if (!(ok(st_status_)))                                                                  \
      ST_THROW(Type, #expr << " failed: " << describe(st_status_) << " (" << __FILE__ << ":" \
                           << __LINE__ << ")");                                             \
  } while (0)

}  // namespace st
