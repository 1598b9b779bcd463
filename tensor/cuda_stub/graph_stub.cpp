// CPU-only build: DeviceGraph exists (tensor/graph.h) but cannot capture anything.
#include "tensor/graph.h"

#include "tensor/error.h"

namespace st {

struct DeviceGraph::Impl {};
DeviceGraph::DeviceGraph() : impl_(std::make_unique<Impl>()) {}
DeviceGraph::~DeviceGraph() = default;
bool DeviceGraph::captured() const { return false; }
void DeviceGraph::capture(const std::function<void()>&) {
  ST_THROW(DeviceError, "CUDA graphs: this shardtrain was built without CUDA (CPU-only build)");
}
void DeviceGraph::replay() { ST_THROW(DeviceError, "CUDA graphs: this shardtrain was built without CUDA (CPU-only build)"); }

}  // namespace st
