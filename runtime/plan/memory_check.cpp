// The parameter-memory estimate and what this rank could get (see the header).
#include "runtime/plan/memory_check.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "runtime/parallel/parameter_sharding.h"
#include "runtime/setup/model_registry.h"
#include "tensor/storage.h"

namespace st::runtime {
namespace {

// A number from the first line of `path` ("max" or no file: < 0).
double read_number(const std::string& path) {
  std::ifstream in(path);
  double v = -1;
  if (!(in >> v)) return -1;
  return v;
}

}  // namespace

std::string human_bytes(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024 && u < 6) b /= 1024, ++u;
  char buf[48];
  std::snprintf(buf, sizeof buf, b >= 1e4 ? "%.3g %s" : "%.1f %s", b, unit[u]);
  return buf;
}

ParamBytes param_bytes(Precision precision, OptimizerKind optimizer, bool snapshot_block) {
  const bool mixed = precision != Precision::fp32;
  return {mixed ? 2.0 : 4.0, mixed ? 2.0 : 4.0, mixed ? 4.0 : 0.0, optimizer == OptimizerKind::adamw ? 8.0 : 4.0,
          snapshot_block ? 12.0 : 0.0};
}

MemoryEstimate estimate_training_memory(const TrainConfig& cfg, const nlohmann::json& entry, int64_t tp, int64_t dp) {
  MemoryEstimate e;
  const ModelFactory& f = model_factory(entry.value("family", model_family(cfg)));
  if (!f.param_count) {
    e.params = -1;
    return e;
  }
  e.params = f.param_count(entry.at("config"));
  const bool mixed = cfg.precision != Precision::fp32;
  const int zero = zero_stage_in_effect(cfg.zero, dp);
  const double share = zero >= 1 ? 1.0 / static_cast<double>(dp) : 1.0;  // ZeRO-1: this rank's part
  const ParamBytes b = param_bytes(cfg.precision, cfg.optimizer, keeps_snapshot_block(cfg));
  const double state = b.state + b.snapshot, weights = b.weight, grads = b.grad, master = b.master;
  const double grad_share = zero >= 2 ? share : 1.0;  // ZeRO-2: the owned gradients after the reduce
  const double weight_share = zero >= 3 ? share : 1.0;  // ZeRO-3: the parameter shards (a gathered layer beside them)
  e.bytes_per_param = weights * weight_share + grads * grad_share + (master + state) * share;
  std::ostringstream o;
  o << to_string(cfg.precision) << " weights " << weights << (mixed ? " + f32 master 4" : "") << " + grads " << grads
    << " + " << (cfg.optimizer == OptimizerKind::adamw ? "AdamW moments 8" : "SGD momentum 4")
    << (b.snapshot > 0 ? " + the asynchronous save's copies 12" : "");
  if (share < 1)
    o << " (master and state" << (grad_share < 1 ? ", grads" : "") << (weight_share < 1 ? ", weights" : "") << " / dp "
      << dp << " under ZeRO-" << zero << ")";
  e.formula = o.str();
  e.rank_bytes = e.params * e.bytes_per_param / static_cast<double>(tp * cfg.pp);
  return e;
}

AvailableMemory available_memory(Device device) {
  AvailableMemory a;
  if (device == Device::cuda) {
    a.bytes = static_cast<double>(cuda::device_bytes_free());
    a.source = "free on the CUDA device";
    return a;
  }
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") {
      a.bytes = kib * 1024;
      a.source = "MemAvailable in /proc/meminfo";
      break;
    }
  const double limit = read_number("/sys/fs/cgroup/memory.max"), used = read_number("/sys/fs/cgroup/memory.current");
  if (limit > 0 && used >= 0 && (a.source.empty() || limit - used < a.bytes)) {
    a.bytes = limit - used;
    a.source = "left under the cgroup's memory.max";
  }
  return a;
}

void check_fits_in_memory(const TrainConfig& cfg, const nlohmann::json& entry, int64_t tp, int64_t dp) {
  const MemoryEstimate e = estimate_training_memory(cfg, entry, tp, dp);
  if (e.params < 0) return;
  const AvailableMemory a = available_memory(cfg.device);
  if (a.source.empty() || e.rank_bytes <= a.bytes) return;  // nothing known to compare with, or it fits
  char params[32];
  std::snprintf(params, sizeof params, "%.4g", e.params);
  ST_THROW(OutOfMemoryError, "the model does not fit: " << params << " parameters (" << model_family(cfg) << ", layers "
                                                        << cfg.layers << ", d-model " << cfg.d_model << ") need at least "
                                                        << human_bytes(e.rank_bytes) << " on this rank ("
                                                        << e.bytes_per_param << " bytes per parameter: " << e.formula
                                                        << "; / tp " << tp << " × pp " << cfg.pp << "), "
                                                        << human_bytes(a.bytes) << " available (" << a.source << ")");
}

}  // namespace st::runtime
