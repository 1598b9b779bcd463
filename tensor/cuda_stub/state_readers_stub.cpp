// CPU-only builds: nothing runs beside anything (tensor/state_readers.h).
#include "tensor/state_readers.h"

namespace st::cuda {

StateReaderScope::StateReaderScope() = default;
StateReaderScope::~StateReaderScope() = default;
void wait_for_state_readers() {}

}  // namespace st::cuda
