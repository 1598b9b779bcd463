// Device listing of a CPU-only build (the CUDA build compiles launch/devices_cuda.cpp instead).
#include <thread>

#include "launch/build_info.h"

namespace st::launch {

std::string describe_devices() {
  return "cpu: " + std::to_string(std::thread::hardware_concurrency()) +
         " hardware threads\ncuda: none (built without CUDA)\n";
}

std::string cuda_unusable() { return "this build has no CUDA (built without CUDA; shardtrain info lists the devices)"; }

}  // namespace st::launch
