// CPU-only build: DeviceGraph exists (tensor/graph.h) but cannot capture anything.
#include "tensor/graph.h"

#include "tensor/error.h"

namespace st {

struct DeviceGraph::Impl {
  Tensor none;
};
DeviceGraph::DeviceGraph() : impl_(std::make_unique<Impl>()) {}
DeviceGraph::~DeviceGraph() = default;
bool DeviceGraph::captured() const { return false; }
void DeviceGraph::capture(const std::function<void()>&) {
  ST_THROW(DeviceError, "CUDA graphs: this shardtrain was built without CUDA (CPU-only build)");
}
void DeviceGraph::replay() { ST_THROW(DeviceError, "CUDA graphs: this shardtrain was built without CUDA (CPU-only build)"); }
const Tensor& DeviceGraph::checks() const { return impl_->none; }
size_t DeviceGraph::check_count() const { return 0; }
void DeviceGraph::run_checks(const int64_t*) const {}
void DeviceGraph::add_check(const Tensor&, std::function<void(const std::vector<int64_t>&)>) {
  ST_THROW(DeviceError, "CUDA graphs: this shardtrain was built without CUDA (CPU-only build)");
}

}  // namespace st
