// Checkpoint directory bookkeeping: temporary-then-rename commits, listing, retention.
#include "runtime/io/checkpoint_dir.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "runtime/common/checksum.h"
#include "runtime/common/json_io.h"
#include "runtime/io/safetensors_index.h"
#include "tensor/error.h"

namespace st::runtime {
namespace {

constexpr const char* kStateChecksumKey = "checksum64";
// Why a checkpoint without its checksums is refused: every one this program wrote since
// 2026-12-03 (88a2b52) has them — state.json its checksum64, each tensor file its checksums (by
// tensor then, by chunk since 2026-12-05, with state.json's record of the files) — so one without
// them had them removed, and reading it would go through no check at all.
constexpr const char* kStrippedNote =
    "(every checkpoint written since 2026-12-03 has them: they were removed, or it is older); refused rather than "
    "read unchecked (--allow-unchecked 1 reads it as it is)";

// Of the compact dump (nlohmann::json keeps keys sorted, so the text is canonical).
std::string state_checksum(const nlohmann::json& state) {
  const std::string text = state.dump();
  return checksum_hex(checksum64(text.data(), text.size()));
}

}  // namespace
namespace fs = std::filesystem;

namespace {
constexpr const char* kPrefix = "step_";
constexpr const char* kTmpPrefix = ".tmp-";
constexpr const char* kOldPrefix = ".old-";
constexpr const char* kGatherPrefix = ".gather-";  // per-rank files of the gather older versions used

// "step_00000010" → 10; anything else → nullopt.
std::optional<int64_t> parse_step(const std::string& name) {
  const std::string p = kPrefix;
  if (name.size() <= p.size() || name.compare(0, p.size(), p) != 0 || name.size() > p.size() + 18) return std::nullopt;
  int64_t v = 0;
  for (size_t i = p.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

void remove_tree(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) ST_THROW(IOError, "checkpoint: cannot remove " << p.string() << ": " << ec.message());
}
}  // namespace

CheckpointDir::CheckpointDir(std::string root) : root_(std::move(root)) {
  if (root_.empty()) ST_THROW(ValueError, "checkpoint: empty checkpoint directory");
}

std::string CheckpointDir::step_name(int64_t step) {
  if (step < 0) ST_THROW(ValueError, "checkpoint: negative step " << step);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%s%08lld", kPrefix, static_cast<long long>(step));
  return buf;
}

std::string CheckpointDir::path_for(int64_t step) const { return (fs::path(root_) / step_name(step)).string(); }
std::string CheckpointDir::temp_path_for(int64_t step) const {
  return (fs::path(root_) / (std::string(kTmpPrefix) + step_name(step))).string();
}

std::string CheckpointDir::begin(int64_t step) const {
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec) ST_THROW(IOError, "checkpoint: cannot create " << root_ << ": " << ec.message());
  const fs::path tmp = temp_path_for(step);
  remove_tree(tmp);
  fs::create_directory(tmp, ec);
  if (ec) ST_THROW(IOError, "checkpoint: cannot create " << tmp.string() << ": " << ec.message());
  return tmp.string();
}

std::string CheckpointDir::join_temp(int64_t step) const {
  const fs::path tmp = temp_path_for(step);
  std::error_code ec;
  fs::create_directories(tmp, ec);  // an existing directory (another rank made it first) is no error
  if (ec) ST_THROW(IOError, "checkpoint: cannot create " << tmp.string() << ": " << ec.message());
  return tmp.string();
}

std::string CheckpointDir::commit(int64_t step) const {
  const fs::path tmp = temp_path_for(step);
  const fs::path final_path = path_for(step);
  std::error_code ec;
  if (!fs::is_directory(tmp, ec)) ST_THROW(IOError, "checkpoint: " << tmp.string() << " does not exist (begin() not called?)");
  for (const auto& e : fs::recursive_directory_iterator(tmp)) {
    if (e.is_regular_file()) fsync_path(e.path().string());
  }
  fsync_path(tmp.string());
  if (fs::exists(final_path, ec)) {  // a checkpoint of this step exists: move it aside, then delete
    const fs::path old = fs::path(root_) / (std::string(kOldPrefix) + step_name(step));
    remove_tree(old);
    if (::rename(final_path.c_str(), old.c_str()) != 0)
      ST_THROW(IOError, "checkpoint: cannot move " << final_path.string() << " aside: " << std::strerror(errno));
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0)
    ST_THROW(IOError, "checkpoint: cannot rename " << tmp.string() << " to " << final_path.string() << ": " << std::strerror(errno));
  fsync_path(root_);
  remove_tree(fs::path(root_) / (std::string(kOldPrefix) + step_name(step)));
  return final_path.string();
}

std::vector<int64_t> CheckpointDir::complete_steps() const {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(root_, ec)) return steps;
  for (const auto& e : fs::directory_iterator(root_)) {
    if (!e.is_directory()) continue;
    if (auto s = parse_step(e.path().filename().string())) steps.push_back(*s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<int64_t> CheckpointDir::latest_step() const {
  auto s = complete_steps();
  if (s.empty()) return std::nullopt;
  return s.back();
}

std::string CheckpointDir::latest() const {
  auto s = latest_step();
  return s ? path_for(*s) : std::string();
}

std::vector<std::string> CheckpointDir::stale() const {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(root_, ec)) return out;
  for (const auto& e : fs::directory_iterator(root_)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(kTmpPrefix, 0) == 0 || n.rfind(kOldPrefix, 0) == 0 || n.rfind(kGatherPrefix, 0) == 0)
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void CheckpointDir::remove_stale() const {
  for (const auto& p : stale()) remove_tree(p);
}

std::vector<int64_t> CheckpointDir::keep_last(int64_t n) const {
  std::vector<int64_t> removed;
  if (n <= 0) return removed;
  auto steps = complete_steps();  // incomplete ones neither count nor go: the newest n whole ones stay
  std::erase_if(steps, [&](int64_t s) { return !incomplete(s).empty(); });
  if (static_cast<int64_t>(steps.size()) <= n) return removed;
  for (size_t i = 0; i + static_cast<size_t>(n) < steps.size(); ++i) {
    remove_tree(path_for(steps[i]));
    removed.push_back(steps[i]);
  }
  return removed;
}

std::string CheckpointDir::incomplete(int64_t step) const {
  const fs::path dir = path_for(step);
  std::error_code ec;
  auto missing = [&](const std::string& name) { return !fs::exists(dir / name, ec); };
  for (const char* f : {"state.json", "config.json"})
    if (missing(f)) return std::string("no ") + f;
  for (const std::string base : {"model", "optimizer"}) {
    const std::string index = base + ".safetensors.index.json";
    if (missing(index)) {
      if (missing(base + ".safetensors")) return "no " + base + ".safetensors (nor its index)";
      continue;
    }
    try {  // an index that does not parse is not incomplete but wrong: its reader says so
      const nlohmann::json j = read_json_file((dir / index).string());
      for (const auto& [name, file] : j.at("weight_map").items())
        if (file.is_string() && missing(file.get<std::string>())) return file.get<std::string>() + " is missing";
    } catch (const std::exception&) {
    }
  }
  try {
    const nlohmann::json state = read_json_file((dir / "state.json").string());
    if (state.contains("files") && state.at("files").is_object())
      for (const auto& [file, sum] : state.at("files").items())
        if (missing(file)) return file + " is missing";
  } catch (const std::exception&) {  // likewise: read_state names what is wrong
  }
  return "";
}

CheckpointDir::ResumePoint CheckpointDir::resume_point() const {
  ResumePoint p;
  const std::vector<int64_t> steps = complete_steps();
  std::string passed;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const std::string why = incomplete(*it);
    if (why.empty()) {
      p.path = path_for(*it);
      p.step = *it;
      break;
    }
    passed += (passed.empty() ? "" : ", ") + step_name(*it) + " (" + why + ")";
  }
  if (!passed.empty())
    p.note = root_ + ": " + passed + (passed.find("), ") == std::string::npos ? " is" : " are") + " incomplete; " +
             (p.path.empty() ? "no complete checkpoint is left" : "the newest complete one is " + step_name(p.step));
  return p;
}

nlohmann::json state_files_record(const std::string& dir, const std::vector<std::string>& files) {
  nlohmann::json record = nlohmann::json::object();
  for (const std::string& f : files)
    record[f] = checksum_hex(SafetensorsReader((fs::path(dir) / f).string()).header_checksum());
  return record;
}

void check_files_record(const nlohmann::json& files, const SafetensorsStore& store, const std::string& base,
                        bool allow_unchecked) {
  if (!files.is_object()) {  // an older checkpoint: no record; its files carry their checksums
    if (allow_unchecked) return;
    for (const std::string& file : store.unchecked_files())
      ST_THROW(IOError, store.directory() << "/" << file << ": neither state.json nor the file records its checksums "
                                          << kStrippedNote);
    return;
  }
  const std::map<std::string, uint64_t> opened = store.header_checksums();
  for (const auto& [file, sum] : opened) {
    ST_CHECK(files.contains(file), IOError,
             store.directory() << "/" << file << ": state.json does not record this file (a file the checkpoint was "
                               << "not written with)");
    const nlohmann::json& want = files.at(file);
    ST_CHECK(want.is_string() && want.get<std::string>() == checksum_hex(sum), IOError,
             "safetensors " << store.directory() << "/" << file << ": the header differs from the one state.json "
                            << "recorded (" << want.dump() << ", the header gives " << checksum_hex(sum)
                            << "): the file changed after it was written");
  }
  for (const auto& [file, sum] : files.items())
    ST_CHECK((file.rfind(base + ".", 0) != 0 && file.rfind(base + "-", 0) != 0) || opened.count(file), IOError,
             store.directory() << ": state.json records " << file << ", which " << store.where() << " does not name");
}

void check_config_json(const std::string& checkpoint_path, const nlohmann::json& config) {
  const std::string path = (fs::path(checkpoint_path) / "config.json").string();
  const nlohmann::json j = read_json_file(path);
  ST_CHECK(j.is_object(), ValueError, path << ": not a JSON object");
  if (!config.is_object()) return;
  for (const auto& [key, want] : config.items()) {
    const bool has = j.contains(key);
    ST_CHECK(has && j.at(key) == want, ValueError,
             path << ": " << key << " " << (has ? j.at(key).dump() : std::string("is missing"))
                  << (has ? "" : ",") << " disagrees with the checkpoint's tensors (" << key << " " << want.dump()
                  << ", as its state.json records them); config.json changed after the checkpoint was written");
  }
}

void write_state(const std::string& checkpoint_path, const nlohmann::json& state) {
  const std::string path = (fs::path(checkpoint_path) / "state.json").string();
  ST_CHECK(state.is_object() && !state.contains(kStateChecksumKey), IOError,
           path << ": the state to write must be an object without '" << kStateChecksumKey << "'");
  nlohmann::json j = state;
  j[kStateChecksumKey] = state_checksum(state);
  write_json_file(path, j);
}

nlohmann::json read_state(const std::string& checkpoint_path, bool require_checksum) {
  const std::string path = (fs::path(checkpoint_path) / "state.json").string();
  nlohmann::json j = read_json_file(path);
  ST_CHECK(!require_checksum || !j.is_object() || j.contains(kStateChecksumKey), IOError,
           path << ": has no " << kStateChecksumKey << " " << kStrippedNote);
  if (!j.is_object() || !j.contains(kStateChecksumKey)) return j;  // not ours: TrainState::from_json judges it
  const nlohmann::json stored = j[kStateChecksumKey];
  j.erase(kStateChecksumKey);
  const std::string want = stored.is_string() ? stored.get<std::string>() : stored.dump();
  ST_CHECK(want == state_checksum(j), IOError,
           path << ": does not match its checksum (" << kStateChecksumKey << " " << want << ", the content gives "
                << state_checksum(j) << "): the file changed after it was written");
  return j;
}

}  // namespace st::runtime
