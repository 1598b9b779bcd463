// `shardtrain prepare --input PATH [--input PATH ...] --out DIR`: a corpus of documents → a directory of
// token shards with index.json (runtime/data/corpus_index.h), read by `train --data DIR`.
// Each document (launch/corpus_inputs.h) becomes [BOS] ids [EOS] — the tokenizer's own (a
// tokenizer.json: its BOS and EOS around the library's encode without special tokens; gpt2: no
// BOS, <|endoftext|> 50256 after every document, as GPT-2 was trained; byte: neither) unless
// --bos-id / --eos-id say otherwise — and the documents' tokens follow one another in input
// order, cut into shards of --shard-tokens. Tokenizing runs on --threads threads a batch of
// documents at a time; the output is the same bytes for any thread count (every document is
// tokenized alone and written in order). A validation split (--val-fraction F or --val-docs N)
// takes N = round(F·D) of the D documents, spread evenly — document d (from 0) goes to DIR/val/
// when ⌊(d+1)·N/D⌋ > ⌊d·N/D⌋ — and DIR/val/ is a corpus directory of the same form.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/data/corpus_index.h"

namespace st::launch {

struct CorpusPrepareOptions {
  std::vector<std::string> inputs;
  std::string out_dir;
  std::string tokenizer = "byte", vocab;  // launch/text_codec.h
  std::string text_field = "text";
  int64_t shard_tokens = 100'000'000;
  int64_t threads = 0;               // 0: every core
  int64_t bos_id = -2, eos_id = -2;  // -2: the tokenizer's; -1: none; else that id
  double val_fraction = 0;
  int64_t val_docs = 0;
  bool force = false;
  bool progress = false;             // a progress line redrawn on stdout (a terminal)
  size_t batch_bytes = size_t{4} << 20;  // text tokenized per batch (tests: small, for many batches)
  std::function<void()> on_shard;    // after each shard (train or val) is in place: a test hook
};

struct CorpusPrepareResult {
  runtime::CorpusIndex train, val;  // val.shards empty: no split
  uint64_t text_bytes = 0;
  double seconds = 0;
  int64_t threads = 1;
};

// Throws UsageError naming the input (file:line for JSONL), IOError naming a file it cannot read
// or write; a corpus with no documents or no text is refused before anything is written.
CorpusPrepareResult prepare_corpus(const CorpusPrepareOptions& o);

}  // namespace st::launch
