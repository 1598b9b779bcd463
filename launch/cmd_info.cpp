// `shardtrain info`: build features (CUDA / NCCL / cuDNN), MPI and library versions, devices.
#include <mpi.h>

#include <iostream>
#include <string>

#include "launch/build_info.h"
#include "launch/commands.h"
#include "launch/gpu_env.h"
#include "launch/options.h"
#include "tensor/storage.h"

namespace st::launch {

int cmd_info(const std::vector<std::string>& args) {
  if (OptionTable::wants_help(args)) {
    std::cout << "usage: shardtrain info\n\nPrints the build features (CUDA, NCCL, cuDNN), the MPI library and other\n"
                 "library versions, and the devices this process can see.\n";
    return 0;
  }
  if (!args.empty()) ST_THROW(UsageError, "info: takes no arguments, got '" << args[0] << "'");
  const BuildInfo& b = build_info();
  auto feature = [](bool on, const std::string& version) {
    return on ? std::string("yes") + (version.empty() ? "" : " " + version) : std::string("no");
  };
  std::cout << "shardtrain " << b.version << " (commit " << b.commit << ", " << b.build_type << ", " << b.compiler << ")\n";
  std::cout << "CUDA: " << feature(b.cuda, b.cuda_version) << (b.cuda ? std::string(" (arch ") + b.cuda_arch + ")" : "") << "\n";
  std::cout << "NCCL: " << feature(b.nccl, b.nccl_version) << "\n";
  std::cout << "cuDNN: " << feature(b.cudnn, b.cudnn_version) << "\n";
  if (b.cuda) {  // docs/launch.md, "GPU settings"
    const AttentionSetting a = attention_setting();
    using ops::AttentionBackend;
    const std::string what =
        !a.backend                            ? "not one of deterministic, fast, cudnn, flash: train and generate refuse it"
        : a.backend == AttentionBackend::Flash ? "own flash kernels (bitwise reproducible)"
        : !b.cudnn                            ? "own flash kernels (built without cuDNN)"
        : a.backend == AttentionBackend::Cudnn ? "cuDNN fused attention, an error where it declines the shape"
        : a.backend == AttentionBackend::Fast
            ? "cuDNN fused attention (dQ by atomics) where it takes the shape, else own flash kernels"
            : "cuDNN fused attention, deterministic backward, where it takes the shape, else own flash kernels";
    std::cout << "attention (GPU, f16/bf16): " << a.variable << "=" << a.value << ": " << what << "\n";
  }
  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(lib, &len);
  std::string mpi(lib, static_cast<size_t>(len));
  if (auto nl = mpi.find_first_of("\r\n,"); nl != std::string::npos) mpi.resize(nl);
  int major = 0, minor = 0;
  MPI_Get_version(&major, &minor);
  std::cout << "MPI: " << mpi << " (MPI " << major << "." << minor << ")\n";
  std::cout << "libraries: Eigen " << b.eigen_version << ", nlohmann_json " << b.json_version << ", yaml-cpp "
            << b.yaml_cpp_version << "\n";
  std::cout << "devices:\n" << describe_devices();
  std::cout << "cuda available: " << (st::cuda::available() ? "yes" : "no") << "\n";
  return 0;
}

}  // namespace st::launch
