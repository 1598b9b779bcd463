#include "runtime/observe/metrics.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iterator>

#include "runtime/common/json_io.h"
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
  if (ranks > 1) {
    j["mem_bytes_max"] = mem_max_bytes;
    j["mem_bytes_max_rank"] = mem_max_rank;
  }
  if (fp8_overflow) j["fp8_overflow"] = *fp8_overflow;
  if (fp8_underflow) j["fp8_underflow"] = *fp8_underflow;
  return j;
}

std::string StepMetrics::line(int64_t total_steps) const {
  char buf[320];
  const int64_t mem = ranks > 1 ? mem_max_bytes : mem_bytes;  // several ranks: the largest
  // the loss scale only where there is one (fp16: not 1, or a skipped step): 15 columns less for the rest
  char scale[48] = "";
  if (loss_scale != 1.0 || skipped) std::snprintf(scale, sizeof scale, " | loss scale %g", loss_scale);
  std::snprintf(buf, sizeof buf, "step %lld/%lld | loss %.6f | lr %.3e | grad norm %.4f%s | %.0f tok/s | %.1f ms | mem %s",
                static_cast<long long>(step), static_cast<long long>(total_steps), loss, lr, grad_norm, scale,
                tokens_per_s, step_ms, human_bytes(static_cast<double>(mem)).c_str());
  std::string s = buf;
  if (ranks > 1) s += " on rank " + std::to_string(mem_max_rank) + ", the largest of " + std::to_string(ranks);
  if (mem_total_bytes > 0) {
    std::snprintf(buf, sizeof buf, " (%.1f%% of %s)", 100.0 * static_cast<double>(mem) / static_cast<double>(mem_total_bytes),
                  human_bytes(static_cast<double>(mem_total_bytes)).c_str());
    s += buf;
  }
  if (mfu) {
    std::snprintf(buf, sizeof buf, " | mfu %.1f%%", 100 * *mfu);
    s += buf;
  }
  if (skipped) s += " | skipped (inf/nan)";
  if (fp8_overflow.value_or(0) > 0 || fp8_underflow.value_or(0) > 0)
    s += " | fp8 overflow " + std::to_string(fp8_overflow.value_or(0)) + ", underflow " +
         std::to_string(fp8_underflow.value_or(0));
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

int64_t cut_metrics_back(const std::string& path, int64_t step) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return 0;
  std::ifstream in(path, std::ios::binary);
  ST_CHECK(in.good(), IOError, "metrics: cannot open " << path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  std::string kept;
  int64_t dropped = 0;
  for (size_t begin = 0; begin < text.size();) {
    const size_t nl = text.find('\n', begin);
    const bool torn = nl == std::string::npos;  // the last line of a crashed writer
    const std::string line = text.substr(begin, torn ? std::string::npos : nl - begin);
    begin = torn ? text.size() : nl + 1;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool parsed = !j.is_discarded();
    const bool later = parsed && j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
                       j["step"].get<int64_t>() > step;
    if (later || ((torn || begin == text.size()) && !parsed && !line.empty())) {
      ++dropped;
      continue;
    }
    kept += line + "\n";
  }
  if (dropped == 0 && (text.empty() || text.back() == '\n')) return 0;
  const std::string tmp = temp_name_for(path);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << kept;
    out.flush();
    ST_CHECK(out.good(), IOError, "metrics: cannot write " << tmp);
  }
  fsync_path(tmp);
  std::filesystem::rename(tmp, path, ec);
  ST_CHECK(!ec, IOError, "metrics: cannot rename " << tmp << " to " << path << ": " << ec.message());
  fsync_parent_dir(path);
  return dropped;
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
