// CorpusIndex: a `shardtrain prepare` directory's index.json (docs/design.md, "Corpus
// directories"), and its per-shard document index files.
//   DIR/index.json   {"format": "shardtrain-corpus", "version": 1, "tokenizer", "vocab_size",
//                     "bos_id", "eos_id" (-1: none), "token_version" (1: uint16, 2: uint32),
//                     "dtype", "shard_tokens", "documents", "tokens",
//                     "shards": [{"file", "tokens", "documents", "first_document", "doc_index"}]}
//   DIR/shard_NNNNNN.bin  the stream of documents cut every shard_tokens tokens (a token file,
//                         runtime/data/token_data.h; a document may continue in the next shard)
//   DIR/shard_NNNNNN.idx  where the documents that START in the shard start: 256 int32 header
//                         (magic 20241207, version 1, count), then count int64 token offsets
//                         within the shard, ascending
// The offsets live in .idx files, not in index.json: a 100M-token shard of ~1k-token documents
// has ~100k of them, which would make index.json megabytes per shard, parsed by every rank at
// start; the .idx are read only by whoever needs document boundaries.
// index.json is written last (atomically), so a directory without it is not a corpus.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace st::runtime {

constexpr int32_t kDocIndexMagic = 20241207;

struct CorpusShard {
  std::string file;       // relative to the directory
  int64_t tokens = 0;
  int64_t documents = 0;  // documents starting in this shard
  int64_t first_document = 0;  // corpus-wide index of the first of them
  std::string doc_index;  // its .idx file, relative to the directory
};

struct CorpusIndex {
  std::string tokenizer;
  int64_t vocab_size = 0;
  int64_t bos_id = -1, eos_id = -1;  // -1: none
  int32_t token_version = 1;         // 1: uint16 tokens, 2: uint32
  int64_t shard_tokens = 0;
  int64_t documents = 0, tokens = 0;
  std::vector<CorpusShard> shards;

  nlohmann::json to_json() const;
  // Reads DIR/index.json; IOError naming the file when it is missing, not JSON, or not this format.
  static CorpusIndex read(const std::string& dir);
  static std::string path_in(const std::string& dir);  // DIR/index.json
};

// Writes / reads a .idx file atomically; IOError naming the file (bad header, truncated).
void write_doc_index(const std::string& path, const std::vector<int64_t>& offsets);
std::vector<int64_t> read_doc_index(const std::string& path);

}  // namespace st::runtime
