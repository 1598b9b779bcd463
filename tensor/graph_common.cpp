// The device-independent half of tensor/graph.h: which graph this thread captures, the host-read
// guard, and check_on_host's choice between now and after each replay.
#include "tensor/graph.h"

#include "tensor/error.h"

namespace st {
namespace {
thread_local DeviceGraph* t_capturing = nullptr;
thread_local const char* t_guard = nullptr;  // why host reads are refused now (null: allowed)
}  // namespace

DeviceGraph* capturing_graph() { return t_capturing; }
void detail::set_capturing_graph(DeviceGraph* g) { t_capturing = g; }

HostReadGuard::HostReadGuard(const char* why) : outer_(t_guard) { t_guard = why; }
HostReadGuard::~HostReadGuard() { t_guard = outer_; }
AllowHostReads::AllowHostReads() : outer_(t_guard) { t_guard = nullptr; }
AllowHostReads::~AllowHostReads() { t_guard = outer_; }

void check_host_read(const char* what) {
  if (t_guard)
    ST_THROW(CaptureError, what << " inside " << t_guard
                                << ": a device value cannot reach the host there (the step would wait on it, and a "
                                   "graph would bake the value in); keep it on the device or use check_on_host");
}

void check_on_host(const Tensor& values, std::function<void(const std::vector<int64_t>&)> check) {
  ST_CHECK(values.dtype() == DType::i64 && values.numel() <= 16, ValueError,
           "check_on_host: expected at most 16 i64 values, got " << values.describe());
  if (DeviceGraph* g = capturing_graph()) {
    g->add_check(values, std::move(check));
    return;
  }
  Tensor host;
  {
    AllowHostReads allow;  // the sanctioned read
    host = (values.device() == Device::cpu ? values : values.to(Device::cpu)).contiguous();
  }
  const int64_t* v = host.data<int64_t>();
  check(std::vector<int64_t>(v, v + host.numel()));
}

}  // namespace st
