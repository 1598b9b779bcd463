#include "runtime/observe/metrics.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "tensor/error.h"

namespace st::runtime {
namespace {

nlohmann::ordered_json finite_or_null(double x) {
  return std::isfinite(x) ? nlohmann::ordered_json(x) : nlohmann::ordered_json(nullptr);
}

std::string human_bytes(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", b, unit[u]);
  return buf;
}

}  // namespace

nlohmann::ordered_json StepMetrics::to_json() const {
  nlohmann::ordered_json j = {{"step", step},
                      {"loss", finite_or_null(loss)},
                      {"grad_norm", finite_or_null(grad_norm)},
                      {"lr", lr},
                      {"loss_scale", loss_scale},
                      {"skipped", skipped},
                      {"tokens_per_s", tokens_per_s},
                      {"step_ms", step_ms},
                      {"mfu", mfu ? finite_or_null(*mfu) : nlohmann::ordered_json(nullptr)},
                      {"mem_bytes", mem_bytes},
                      {"mem_total_bytes", mem_total_bytes},
                      {"mem_params", mem_params},
                      {"mem_grads", mem_grads},
                      {"mem_optim", mem_optim},
                      {"mem_act_peak", mem_act_peak},
                      {"mem_peak", mem_peak}};
  if (val_loss) j["val_loss"] = finite_or_null(*val_loss);
  return j;
}

std::string StepMetrics::line(int64_t total_steps) const {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "step %lld/%lld | loss %.6f | lr %.3e | grad norm %.4f | loss scale %g | %.0f tok/s | %.1f ms | mem %s",
                static_cast<long long>(step), static_cast<long long>(total_steps), loss, lr, grad_norm, loss_scale,
                tokens_per_s, step_ms, human_bytes(static_cast<double>(mem_bytes)).c_str());
  std::string s = buf;
  if (mem_total_bytes > 0) {
    std::snprintf(buf, sizeof buf, " (%.1f%% of %s)", 100.0 * static_cast<double>(mem_bytes) / static_cast<double>(mem_total_bytes),
                  human_bytes(static_cast<double>(mem_total_bytes)).c_str());
    s += buf;
  }
  if (mfu) {
    std::snprintf(buf, sizeof buf, " | mfu %.1f%%", 100 * *mfu);
    s += buf;
  }
  if (skipped) s += " | skipped (inf/nan)";
  if (val_loss) {
    std::snprintf(buf, sizeof buf, " | val loss %.6f", *val_loss);
    s += buf;
  }
  return s;
}

MetricsWriter::MetricsWriter(const std::string& path, bool append) : path_(path) {
  if (path_.empty()) return;
  std::error_code ec;
  auto parent = std::filesystem::path(path_).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);  // an error shows up in open()
  out_.open(path_, append ? std::ios::app : std::ios::trunc);
  ST_CHECK(out_.good(), IOError, "metrics: cannot open " << path_ << " for writing");
}

void MetricsWriter::write(const StepMetrics& m) {
  if (path_.empty()) return;
  out_ << m.to_json().dump() << "\n";
  out_.flush();
  ST_CHECK(out_.good(), IOError, "metrics: write to " << path_ << " failed");
}

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::ifstream in(path);
  ST_CHECK(in.good(), IOError, "metrics: cannot open " << path);
  std::vector<nlohmann::json> out;
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception& e) {
      ST_THROW(IOError, "metrics: " << path << " line " << n << ": " << e.what());
    }
  }
  return out;
}

}  // namespace st::runtime
