// DeviceGraph on CUDA (tensor/graph.h): stream capture into a private allocator pool, one
// instantiated executable graph, replays on the captured stream, and the deferred host checks.
#include "tensor/graph.h"

#include <atomic>

#include "tensor/cuda/runtime.h"

namespace st {

struct DeviceGraph::Impl {
  cudaGraphExec_t exec = nullptr;
  cudaStream_t stream = nullptr;
  uint64_t pool = 0;
  Tensor checks;  // (kCheckWords) i64 on the device: the deferred checks' values, written by replays
  struct Check {
    int64_t offset, n;
    std::function<void(const std::vector<int64_t>&)> fn;
  };
  std::vector<Check> list;
  int64_t used = 0;  // words of `checks` taken
};

DeviceGraph::DeviceGraph() : impl_(std::make_unique<Impl>()) {}

DeviceGraph::~DeviceGraph() {
  if (impl_->exec) cudaGraphExecDestroy(impl_->exec);
  impl_->checks = Tensor();  // an ordinary block: freed before the pool retires
  if (impl_->pool) cuda::retire_pool(impl_->pool);
}

bool DeviceGraph::captured() const { return impl_->exec != nullptr; }

void DeviceGraph::capture(const std::function<void()>& fn) {
  ST_CHECK(!impl_->exec && !impl_->pool, ValueError, "DeviceGraph: already captured");
  ST_CHECK(capturing_graph() == nullptr && cuda::allocation_pool() == 0, ValueError,
           "DeviceGraph: captures do not nest");
  static std::atomic<uint64_t> next_pool{1};
  // the check buffer is an ordinary allocation made before the capture: the graph's copies write
  // into it, the host downloads it after a replay
  impl_->checks = Tensor::full({kCheckWords}, -1.0, DType::i64, Device::cuda);
  impl_->pool = next_pool++;
  impl_->stream = cuda::current_stream();
  CHECK_CUDA(cudaStreamBeginCapture(impl_->stream, cudaStreamCaptureModeThreadLocal));
  cuda::set_allocation_pool(impl_->pool);
  detail::set_capturing_graph(this);
  cudaGraph_t graph = nullptr;
  try {
    HostReadGuard guard("a CUDA graph capture");
    fn();
  } catch (...) {
    detail::set_capturing_graph(nullptr);
    cuda::set_allocation_pool(0);
    cudaStreamEndCapture(impl_->stream, &graph);  // ends the (invalidated) capture
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  detail::set_capturing_graph(nullptr);
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

const Tensor& DeviceGraph::checks() const { return impl_->checks; }
size_t DeviceGraph::check_count() const { return impl_->list.size(); }

void DeviceGraph::run_checks(const int64_t* host) const {
  for (const Impl::Check& c : impl_->list) c.fn(std::vector<int64_t>(host + c.offset, host + c.offset + c.n));
}

void DeviceGraph::add_check(const Tensor& values, std::function<void(const std::vector<int64_t>&)> check) {
  ST_CHECK(capturing_graph() == this, ValueError, "DeviceGraph::add_check outside this graph's capture");
  ST_CHECK(values.is_cuda(), DeviceError, "check_on_host in a CUDA graph: the values must be on the GPU, got "
                                               << values.describe());
  const int64_t n = values.numel();
  ST_CHECK(impl_->used + n <= kCheckWords, ValueError,
           "CUDA graph: more than " << kCheckWords << " words of deferred host checks in one step");
  impl_->checks.narrow(0, impl_->used, n).copy_(values.reshape({n}));  // a device copy, recorded in the graph
  impl_->list.push_back({impl_->used, n, std::move(check)});
  impl_->used += n;
}

}  // namespace st
