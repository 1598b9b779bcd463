// DeviceGraph: work on the current CUDA stream captured once and replayed (a CUDA graph).
//
// capture(fn) runs fn with the current stream in capture mode (cudaStreamCaptureModeThreadLocal:
// a host synchronisation or an unsafe call on this thread inside fn fails the capture with a
// CudaError instead of corrupting it) and instantiates the graph; fn's kernels are recorded, not
// run. Every allocation inside fn comes from the graph's private pool of the caching allocator
// (tensor/cuda/allocator.cpp): the addresses the graph reads and writes stay reserved for it
// until it is destroyed, so tensors freed after the capture can be overwritten by a replay only
// if they were the graph's. replay() launches the graph on the stream it was captured on; it
// reads what its kernels read at that point (device buffers updated before the launch, never
// host values: those were baked in at capture).
// A CPU-only build has the class, but capture() throws DeviceError.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

namespace st {

class DeviceGraph {
 public:
  DeviceGraph();
  ~DeviceGraph();
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;

  void capture(const std::function<void()>& fn);  // once; a second capture throws ValueError
  void replay();                                  // ValueError before capture()
  bool captured() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace st
