// A prepare directory's index.json and .idx files (runtime/data/corpus_index.h).
#include "runtime/data/corpus_index.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/common/json_io.h"
#include "tensor/error.h"

namespace st::runtime {
namespace fs = std::filesystem;

nlohmann::json CorpusIndex::to_json() const {
  nlohmann::json shard_list = nlohmann::json::array();
  for (const auto& s : shards)
    shard_list.push_back({{"file", s.file},
                          {"tokens", s.tokens},
                          {"documents", s.documents},
                          {"first_document", s.first_document},
                          {"doc_index", s.doc_index}});
  return {{"format", "shardtrain-corpus"},
          {"version", 1},
          {"tokenizer", tokenizer},
          {"vocab_size", vocab_size},
          {"bos_id", bos_id},
          {"eos_id", eos_id},
          {"token_version", token_version},
          {"dtype", token_version == 2 ? "uint32" : "uint16"},
          {"shard_tokens", shard_tokens},
          {"documents", documents},
          {"tokens", tokens},
          {"shards", shard_list}};
}

std::string CorpusIndex::path_in(const std::string& dir) { return (fs::path(dir) / "index.json").string(); }

CorpusIndex CorpusIndex::read(const std::string& dir) {
  const std::string path = path_in(dir);
  const nlohmann::json j = read_json_file(path);
  CorpusIndex c;
  try {
    if (j.at("format").get<std::string>() != "shardtrain-corpus" || j.at("version").get<int>() != 1)
      ST_THROW(IOError, path << ": not a shardtrain corpus index of version 1 (format " << j.at("format").dump()
                             << ", version " << j.at("version").dump() << ")");
    c.tokenizer = j.at("tokenizer").get<std::string>();
    c.vocab_size = j.at("vocab_size").get<int64_t>();
    c.bos_id = j.at("bos_id").get<int64_t>();
    c.eos_id = j.at("eos_id").get<int64_t>();
    c.token_version = j.at("token_version").get<int32_t>();
    c.shard_tokens = j.at("shard_tokens").get<int64_t>();
    c.documents = j.at("documents").get<int64_t>();
    c.tokens = j.at("tokens").get<int64_t>();
    for (const auto& s : j.at("shards"))
      c.shards.push_back({s.at("file").get<std::string>(), s.at("tokens").get<int64_t>(), s.at("documents").get<int64_t>(),
                          s.at("first_document").get<int64_t>(), s.at("doc_index").get<std::string>()});
  } catch (const nlohmann::json::exception& e) {
    ST_THROW(IOError, path << ": " << e.what());
  }
  if (c.shards.empty()) ST_THROW(IOError, path << ": lists no shards");
  return c;
}

void write_doc_index(const std::string& path, const std::vector<int64_t>& offsets) {
  if (offsets.size() > static_cast<size_t>(INT32_MAX)) ST_THROW(IOError, path << ": too many documents for one .idx file");
  int32_t hdr[256] = {};
  hdr[0] = kDocIndexMagic;
  hdr[1] = 1;
  hdr[2] = static_cast<int32_t>(offsets.size());
  const std::string tmp = temp_name_for(path);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(hdr), sizeof(hdr));
    out.write(reinterpret_cast<const char*>(offsets.data()), static_cast<std::streamsize>(offsets.size() * sizeof(int64_t)));
    out.flush();
    if (!out) ST_THROW(IOError, path << ": cannot write " << tmp);
  }
  fsync_path(tmp);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) ST_THROW(IOError, path << ": rename from " << tmp << " failed: " << ec.message());
}

std::vector<int64_t> read_doc_index(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ST_THROW(IOError, path << ": cannot open");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  int32_t hdr[3] = {};
  if (bytes.size() < 1024) ST_THROW(IOError, path << ": " << bytes.size() << " bytes, shorter than the 1024-byte header");
  std::memcpy(hdr, bytes.data(), sizeof(hdr));
  if (hdr[0] != kDocIndexMagic || hdr[1] != 1)
    ST_THROW(IOError, path << ": bad header (magic " << hdr[0] << ", version " << hdr[1] << "; expected " << kDocIndexMagic << ", 1)");
  const size_t want = 1024 + static_cast<size_t>(hdr[2]) * sizeof(int64_t);
  if (hdr[2] < 0 || bytes.size() != want)
    ST_THROW(IOError, path << ": header says " << hdr[2] << " offsets (" << want << " bytes), the file has " << bytes.size());
  std::vector<int64_t> offsets(static_cast<size_t>(hdr[2]));
  std::memcpy(offsets.data(), bytes.data() + 1024, offsets.size() * sizeof(int64_t));
  return offsets;
}

}  // namespace st::runtime
