// keep_alive_forever: buffers an abandoned MPI request may still read or write. MPI cannot cancel
// a collective, so the memory of an operation given up (its communicator broke, its deadline
// passed) must outlive the request: it is kept until the process ends.
#pragma once
#include <memory>

namespace st::comm {

void keep_alive_forever(std::shared_ptr<void> buffers);

}  // namespace st::comm
