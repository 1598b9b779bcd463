// Hugging Face's sharded safetensors layout: the index and its files as one store.
#include "runtime/io/safetensors_index.h"

#include <cstdio>
#include <filesystem>

#include "runtime/common/json_io.h"
#include "tensor/error.h"

namespace st::runtime {
namespace fs = std::filesystem;

namespace {
std::string index_path(const std::string& dir, const std::string& base) {
  return (fs::path(dir) / (base + ".safetensors.index.json")).string();
}
std::string single_path(const std::string& dir, const std::string& base) {
  return (fs::path(dir) / (base + ".safetensors")).string();
}
}  // namespace

bool SafetensorsStore::exists(const std::string& dir, const std::string& base) {
  return fs::exists(index_path(dir, base)) || fs::exists(single_path(dir, base));
}

SafetensorsStore::SafetensorsStore(const std::string& dir, const std::string& base) : dir_(dir) {
  const std::string index = index_path(dir, base);
  if (!fs::exists(index)) {
    where_ = single_path(dir, base);
    ST_CHECK(fs::exists(where_), IOError, dir << ": neither " << base << ".safetensors nor " << base
                                              << ".safetensors.index.json");
    files_.push_back(std::make_unique<SafetensorsReader>(where_));
    for (auto& e : files_[0]->entries()) file_of_[e.name] = 0;
    return;
  }
  where_ = index;
  const nlohmann::json j = read_json_file(index);
  ST_CHECK(j.is_object() && j.contains("weight_map") && j.at("weight_map").is_object(), IOError,
           index << ": no \"weight_map\" object");
  std::map<std::string, size_t> file_index;  // file name → files_ index
  for (auto it = j.at("weight_map").begin(); it != j.at("weight_map").end(); ++it) {
    ST_CHECK(it.value().is_string(), IOError, index << ": the file of '" << it.key() << "' is not a string");
    const std::string file = it.value().get<std::string>();
    ST_CHECK(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..", IOError,
             index << ": '" << it.key() << "' maps to '" << file << "', not a file name in the directory");
    auto [f, added] = file_index.emplace(file, files_.size());
    if (added) files_.push_back(std::make_unique<SafetensorsReader>((fs::path(dir) / file).string()));
    file_of_[it.key()] = f->second;
  }
  for (auto& [name, k] : file_of_)
    ST_CHECK(files_[k]->find(name) != nullptr, IOError,
             index << ": '" << name << "' is mapped to " << files_[k]->path() << ", which does not hold it");
  for (size_t k = 0; k < files_.size(); ++k)
    for (auto& e : files_[k]->entries()) {
      auto m = file_of_.find(e.name);
      ST_CHECK(m != file_of_.end() && m->second == k, IOError,
               files_[k]->path() << " holds '" << e.name << "', which " << index
                                 << (m == file_of_.end() ? " does not list" : " maps to another file"));
    }
}

std::vector<std::string> SafetensorsStore::names() const {
  std::vector<std::string> out;
  for (auto& [n, k] : file_of_) out.push_back(n);
  return out;
}

std::map<std::string, uint64_t> SafetensorsStore::header_checksums() const {
  std::map<std::string, uint64_t> out;
  for (const auto& f : files_) out[fs::path(f->path()).filename().string()] = f->header_checksum();
  return out;
}

std::vector<std::string> SafetensorsStore::unchecked_files() const {
  std::vector<std::string> out;
  for (const auto& f : files_)
    if (!f->has_checksums()) out.push_back(fs::path(f->path()).filename().string());
  return out;
}

const SafetensorsReader& SafetensorsStore::reader(const std::string& name) const {
  auto it = file_of_.find(name);
  ST_CHECK(it != file_of_.end(), IOError, where_ << ": no tensor named '" << name << "'");
  return *files_[it->second];
}

const SafetensorsReader::Entry& SafetensorsStore::entry(const std::string& name) const {
  return *reader(name).find(name);
}

Tensor SafetensorsStore::read(const std::string& name) const { return reader(name).read(name); }

Tensor SafetensorsStore::read_ranges(const std::string& name, int64_t dim, const std::vector<DimRange>& ranges) const {
  return reader(name).read_ranges(name, dim, ranges);
}

Tensor SafetensorsStore::read_runs(const std::string& name, const std::vector<SafetensorsReader::Run>& runs,
                                   int64_t n) const {
  return reader(name).read_runs(name, runs, n);
}

std::string shard_file_name(const std::string& base, int k, int n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "-%05d-of-%05d.safetensors", k, n);
  return base + buf;
}

void write_safetensors_index(const std::string& dir, const std::string& base, const std::vector<std::string>& files) {
  nlohmann::json map = nlohmann::json::object();
  uint64_t total = 0;
  for (const std::string& file : files) {
    SafetensorsReader r((fs::path(dir) / file).string());
    for (auto& e : r.entries()) {
      ST_CHECK(!map.contains(e.name), IOError,
               dir << ": '" << e.name << "' is in both " << map[e.name].get<std::string>() << " and " << file);
      map[e.name] = file;
    }
    total += r.data_bytes();
  }
  write_json_file(index_path(dir, base), {{"metadata", {{"total_size", total}}}, {"weight_map", map}});
}

}  // namespace st::runtime
