// CPU-only build: the CUDA half of the tensor core is absent; every entry says so clearly.
#include "tensor/device_ops.h"
#include "tensor/rng.h"

namespace st {
namespace {
[[noreturn]] void no_cuda(const char* what) {
  ST_THROW(DeviceError, what << ": this shardtrain was built without CUDA (CPU-only build)");
}
}  // namespace
namespace cuda {
void* device_alloc(size_t) { no_cuda("CUDA allocation"); }
void device_free(void*, size_t) {}
bool available() { return false; }
size_t device_bytes_peak() { return 0; }
std::optional<DeviceProperties> device_properties() { return std::nullopt; }
size_t device_bytes_free() { return 0; }
void release_cached_blocks() {}
void copy(const Tensor&, const Tensor&) { no_cuda("copy to/from a CUDA tensor"); }
void fill(const Tensor&, double) { no_cuda("fill of a CUDA tensor"); }
void add(const Tensor&, const Tensor&, double) { no_cuda("add_ on a CUDA tensor"); }
void pack_bytes(void*, const std::vector<BytePiece>&) { no_cuda("packing CUDA memory"); }
void fill_uniform(Tensor&, uint64_t, uint64_t, float, float) { no_cuda("random fill of a CUDA tensor"); }
void fill_normal(Tensor&, uint64_t, uint64_t, float, float) { no_cuda("random fill of a CUDA tensor"); }
void fill_normal_keyed(Tensor&, uint64_t, float, float, const ElementMap&) { no_cuda("random fill of a CUDA tensor"); }
}  // namespace cuda
}  // namespace st
