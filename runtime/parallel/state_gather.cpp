#include "runtime/parallel/state_gather.h"

#include <filesystem>
#include <set>

namespace st::runtime {

NamedTensors gather_named_tensors(const NamedTensors& local, bool contribute, comm::Communicator& world,
                                  const std::string& dir, const std::string& what) {
  namespace fs = std::filesystem;
  const fs::path parts = fs::path(dir) / (".gather-" + what);
  if (world.rank() == 0) fs::create_directories(parts);
  world.barrier()->wait();
  if (contribute) {
    NamedTensors host;
    for (auto& [n, t] : local) host.emplace_back(n, t.is_cuda() ? t.to(Device::cpu) : t);
    save_safetensors((parts / ("rank" + std::to_string(world.rank()) + ".safetensors")).string(), host);
  }
  world.barrier()->wait();
  NamedTensors out;
  if (world.rank() == 0) {
    std::set<std::string> seen;
    for (int r = 0; r < world.size(); ++r) {
      const fs::path f = parts / ("rank" + std::to_string(r) + ".safetensors");
      if (!fs::exists(f)) continue;
      for (auto& [n, t] : read_safetensors(f.string()).tensors)
        if (seen.insert(n).second) out.emplace_back(n, t);
    }
    fs::remove_all(parts);
  }
  world.barrier()->wait();
  return out;
}

}  // namespace st::runtime
