// ShardWriter: prepare's output stream of tokens → shard_NNNNNN.bin files of `shard_tokens`
// tokens each (the last one shorter), each with its .idx of the documents that start in it, and
// index.json last (runtime/data/corpus_index.h). Every file is written atomically (a temporary
// name, fsync, rename), so a killed prepare leaves no shard that reads as whole under its name
// and no index.json; the directory's leftovers are removed by the next run (clear_prepared_dir).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/data/corpus_index.h"

namespace st::launch {

class ShardWriter {
 public:
  // `base`: index.json's fields but the shards and totals. `on_shard`: called after each shard
  // is renamed into place (a test hook may kill the process there).
  ShardWriter(std::string dir, runtime::CorpusIndex base, std::function<void()> on_shard = {});
  // One document's tokens (BOS / EOS included by the caller).
  void add_document(const std::vector<uint32_t>& tokens);
  // Writes the last shard and index.json; returns the index.
  runtime::CorpusIndex finish();
  int64_t tokens() const { return index_.tokens; }
  int64_t documents() const { return index_.documents; }

 private:
  void flush_shard();
  std::string dir_;
  runtime::CorpusIndex index_;
  std::function<void()> on_shard_;
  std::vector<uint32_t> buf_;      // the current shard's tokens
  std::vector<int64_t> doc_starts_;  // offsets in buf_ of the documents starting in it
  int64_t first_doc_ = 0;          // corpus-wide index of the current shard's first starting document
};

// Makes `dir` ready for a prepare: created if missing; a directory holding only prepare's own
// files (shard_NNNNNN.bin / .idx, their temporaries, val/ likewise) and no index.json is cleared
// (what a killed prepare left); one holding index.json is cleared only with `force`; one holding
// any other file is refused (UsageError naming it) — prepare deletes only what it writes.
void clear_prepared_dir(const std::string& dir, bool force);

}  // namespace st::launch
