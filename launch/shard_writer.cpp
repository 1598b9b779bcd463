// prepare's shards, document indexes and index.json (launch/shard_writer.h).
#include "launch/shard_writer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <regex>

#include "launch/options.h"
#include "runtime/common/json_io.h"
#include "runtime/data/token_data.h"
#include "tensor/error.h"

namespace st::launch {
namespace fs = std::filesystem;
namespace {

std::string shard_name(size_t k, const char* ext) {
  char name[32];
  std::snprintf(name, sizeof(name), "shard_%06zu.%s", k, ext);
  return name;
}

// prepare's own names: index.json, shard_NNNNNN.bin / .idx, and their temporaries (NAME.tmp.*)
bool prepare_wrote(const std::string& name) {
  static const std::regex own(R"((index\.json|shard_[0-9]{6}\.(bin|idx))(\.tmp\..*)?)");
  return std::regex_match(name, own);
}

}  // namespace

ShardWriter::ShardWriter(std::string dir, runtime::CorpusIndex base, std::function<void()> on_shard)
    : dir_(std::move(dir)), index_(std::move(base)), on_shard_(std::move(on_shard)) {
  ST_CHECK(index_.shard_tokens >= 1, UsageError, "prepare: --shard-tokens must be >= 1");
  index_.shards.clear();
  index_.documents = index_.tokens = 0;
}

void ShardWriter::add_document(const std::vector<uint32_t>& tokens) {
  bool started = false;  // a document of no tokens starts nowhere
  for (size_t at = 0; at < tokens.size();) {
    if (!started) {
      doc_starts_.push_back(static_cast<int64_t>(buf_.size()));
      started = true;
    }
    const size_t take = std::min(tokens.size() - at, static_cast<size_t>(index_.shard_tokens) - buf_.size());
    buf_.insert(buf_.end(), tokens.begin() + static_cast<std::ptrdiff_t>(at), tokens.begin() + static_cast<std::ptrdiff_t>(at + take));
    at += take;
    if (static_cast<int64_t>(buf_.size()) == index_.shard_tokens) flush_shard();
  }
  ++index_.documents;
  index_.tokens += static_cast<int64_t>(tokens.size());
}

void ShardWriter::flush_shard() {
  const size_t k = index_.shards.size();
  runtime::CorpusShard s{shard_name(k, "bin"), static_cast<int64_t>(buf_.size()), static_cast<int64_t>(doc_starts_.size()),
                         first_doc_, shard_name(k, "idx")};
  runtime::write_token_file((fs::path(dir_) / s.file).string(), buf_, index_.token_version);
  runtime::write_doc_index((fs::path(dir_) / s.doc_index).string(), doc_starts_);
  first_doc_ += s.documents;
  index_.shards.push_back(s);
  buf_.clear();
  doc_starts_.clear();
  if (on_shard_) on_shard_();
}

runtime::CorpusIndex ShardWriter::finish() {
  if (!buf_.empty() || index_.shards.empty()) flush_shard();
  runtime::fsync_path(dir_);  // the shards' renames, before the index names them
  runtime::write_json_file(runtime::CorpusIndex::path_in(dir_), index_.to_json());
  return index_;
}

void clear_prepared_dir(const std::string& dir, bool force) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) ST_THROW(IOError, "prepare: cannot create " << dir << ": " << ec.message());
    return;
  }
  if (!fs::is_directory(dir, ec)) ST_THROW(UsageError, "prepare: --out " << dir << " exists and is not a directory");
  std::vector<fs::path> own;
  bool complete = false;
  const fs::path val = fs::path(dir) / "val";
  for (const fs::path& d : {fs::path(dir), val}) {
    if (d == val && !fs::is_directory(val, ec)) continue;
    for (const auto& e : fs::directory_iterator(d, ec)) {
      const std::string name = e.path().filename().string();
      if (d != val && name == "val" && e.is_directory(ec)) continue;
      if (!prepare_wrote(name) || !e.is_regular_file(ec))
        ST_THROW(UsageError, "prepare: --out " << dir << " holds " << e.path().string()
                                                   << ", which prepare did not write: choose a new or empty directory");
      complete = complete || name == "index.json";
      own.push_back(e.path());
    }
    if (ec) ST_THROW(IOError, "prepare: cannot list " << d.string() << ": " << ec.message());
  }
  if (complete && !force)
    ST_THROW(UsageError, "prepare: --out " << dir << " already holds a prepared corpus (index.json): --force 1 replaces it");
  // the indexes first, so a prepare killed while clearing leaves no index naming missing shards
  std::stable_partition(own.begin(), own.end(), [](const fs::path& p) { return p.filename() == "index.json"; });
  for (const auto& p : own) {
    fs::remove(p, ec);
    if (ec) ST_THROW(IOError, "prepare: cannot remove " << p.string() << ": " << ec.message());
  }
  if (fs::is_directory(val, ec)) fs::remove(val, ec);  // now empty; made again when this run splits
}

}  // namespace st::launch
