// DeviceGraph: work on the current CUDA stream captured once and replayed (a CUDA graph).
//
// capture(fn) runs fn with the current stream in capture mode (cudaStreamCaptureModeThreadLocal:
// an unsafe call on this thread inside fn fails the capture with a CudaError instead of
// corrupting it) and instantiates the graph; fn's kernels are recorded, not run. Every allocation
// inside fn comes from the graph's private pool of the caching allocator
// (tensor/cuda/allocator.cpp): the addresses the graph reads and writes stay reserved for it
// until it is destroyed, so tensors freed after the capture can be overwritten by a replay only
// if they were the graph's. replay() launches the graph on the stream it was captured on; it
// reads what its kernels read at that point (device buffers updated before the launch, never
// host values: those were baked in at capture).
//
// Host reads inside a capture. A value computed on the device cannot reach the host while the
// graph is being recorded (nothing has run yet), and a host decision taken then would be baked
// into every replay. So while a thread captures, Tensor::item / to_double and copies across host
// and device throw CaptureError naming the read (HostReadGuard; tests arm the same guard around
// a CPU step to prove the step's code reads nothing back). Ops whose contract includes a host
// check of device values (the embedding's and cross-entropy's "id out of range") hand it to
// check_on_host(): outside a capture it runs at once; inside, the values are copied inside the
// graph into the graph's check buffer and the check runs on the host after each replay, on that
// replay's values (DeviceGraph::run_checks with the buffer downloaded).
// A CPU-only build has the class, but capture() throws DeviceError.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "tensor/tensor.h"

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

  // The deferred checks (see the header comment): checks() is the (kCheckWords) i64 device buffer
  // the graph writes their values into; run_checks(host) runs every check on a host copy of it
  // (the first error throws). Empty when the graph has none.
  static constexpr int64_t kCheckWords = 256;
  const Tensor& checks() const;
  size_t check_count() const;
  void run_checks(const int64_t* host) const;

  // Called by check_on_host() while this graph captures: values (n ≤ 16) i64 on the device.
  void add_check(const Tensor& values, std::function<void(const std::vector<int64_t>&)> check);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The graph this thread is capturing, or null.
DeviceGraph* capturing_graph();

// A host check of device values (values: i64, at most 16 elements, any device): now, or after
// each replay when this thread is capturing (see the header comment).
void check_on_host(const Tensor& values, std::function<void(const std::vector<int64_t>&)> check);

// While one is alive on this thread, host reads of tensor values throw CaptureError (DeviceGraph
// arms one for its capture). check_on_host's immediate path is allowed through.
class HostReadGuard {
 public:
  explicit HostReadGuard(const char* why);
  ~HostReadGuard();
  HostReadGuard(const HostReadGuard&) = delete;
  HostReadGuard& operator=(const HostReadGuard&) = delete;

 private:
  const char* outer_;
};
// Lifts this thread's guard for a scope: a read the code means to make (check_on_host's immediate
// path, a seed table's first write), never inside a capture.
class AllowHostReads {
 public:
  AllowHostReads();
  ~AllowHostReads();
  AllowHostReads(const AllowHostReads&) = delete;
  AllowHostReads& operator=(const AllowHostReads&) = delete;

 private:
  const char* outer_;
};
// Throws CaptureError "<what> inside <why>" when a HostReadGuard is alive on this thread.
void check_host_read(const char* what);

namespace detail {
void set_capturing_graph(DeviceGraph* g);  // DeviceGraph::capture's own bookkeeping
}  // namespace detail

}  // namespace st
