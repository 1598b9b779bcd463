// DeviceGraph on CUDA (tensor/graph.h): stream capture into a private allocator pool, one
// instantiated executable graph, replays on the captured stream.
#include "tensor/graph.h"

#include <atomic>

#include "tensor/cuda/runtime.h"

namespace st {

struct DeviceGraph::Impl {
  cudaGraphExec_t exec = nullptr;
  cudaStream_t stream = nullptr;
  uint64_t pool = 0;
};

DeviceGraph::DeviceGraph() : impl_(std::make_unique<Impl>()) {}

DeviceGraph::~DeviceGraph() {
  if (impl_->exec) cudaGraphExecDestroy(impl_->exec);
  if (impl_->pool) cuda::retire_pool(impl_->pool);
}

bool DeviceGraph::captured() const { return impl_->exec != nullptr; }

void DeviceGraph::capture(const std::function<void()>& fn) {
  ST_CHECK(!impl_->exec && !impl_->pool, ValueError, "DeviceGraph: already captured");
  static std::atomic<uint64_t> next_pool{1};
  impl_->pool = next_pool++;
  impl_->stream = cuda::current_stream();
  const uint64_t outer = cuda::allocation_pool();
  ST_CHECK(outer == 0, ValueError, "DeviceGraph: captures do not nest");
  CHECK_CUDA(cudaStreamBeginCapture(impl_->stream, cudaStreamCaptureModeThreadLocal));
  cuda::set_allocation_pool(impl_->pool);
  cudaGraph_t graph = nullptr;
  try {
    fn();
  } catch (...) {
    cuda::set_allocation_pool(0);
    cudaStreamEndCapture(impl_->stream, &graph);  // ends the (invalidated) capture
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  cuda::set_allocation_pool(0);
  CHECK_CUDA(cudaStreamEndCapture(impl_->stream, &graph));
  const cudaError_t e = cudaGraphInstantiate(&impl_->exec, graph, 0);
  cudaGraphDestroy(graph);
  CHECK_CUDA(e);
}

void DeviceGraph::replay() {
  ST_CHECK(impl_->exec, ValueError, "DeviceGraph: replay before capture");
  CHECK_CUDA(cudaGraphLaunch(impl_->exec, impl_->stream));
}

}  // namespace st
