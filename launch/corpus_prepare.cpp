// prepare for a corpus: documents → tokens on every core → shards (launch/corpus_prepare.h).
#include "launch/corpus_prepare.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "launch/corpus_inputs.h"
#include "launch/options.h"
#include "launch/shard_writer.h"
#include "launch/text_codec.h"
#include "runtime/common/json_io.h"
#include "runtime/data/token_data.h"
#include "tensor/error.h"

namespace st::launch {
namespace fs = std::filesystem;
namespace {

// The tokenizer's own BOS / EOS (-1: none) — a tokenizer.json's, GPT-2's <|endoftext|> from its
// vocab.json — and its ids' bound: the largest id + 1 (vocab.json's ids need not be dense).
void tokenizer_specials(const CorpusPrepareOptions& o, const TextCodec& codec, int64_t& bos, int64_t& eos,
                        int64_t& id_bound) {
  bos = codec.bos_id(), eos = codec.eos_id();
  if (o.tokenizer == "gpt2") {
    const std::string path = (fs::path(o.vocab) / "vocab.json").string();
    const nlohmann::json v = runtime::read_json_file(path);
    if (auto it = v.find("<|endoftext|>"); it != v.end() && it->is_number_integer()) eos = it->get<int64_t>();
    for (const auto& [token, id] : v.items())
      if (id.is_number_integer()) id_bound = std::max(id_bound, id.get<int64_t>() + 1);
  }
  if (o.bos_id != -2) bos = o.bos_id;
  if (o.eos_id != -2) eos = o.eos_id;
}

struct Progress {
  bool on = false;
  uint64_t total = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now(), last{};
  void show(uint64_t done, int64_t tokens, int64_t docs, bool force = false) {
    if (!on) return;
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last < std::chrono::milliseconds(250)) return;
    last = now;
    const double s = std::chrono::duration<double>(now - start).count();
    char line[200];
    std::snprintf(line, sizeof(line), "\rprepare: %.1f / %.1f MB (%3.0f%%), %.1f MB/s, %lld documents, %lld tokens ",
                  static_cast<double>(done) / 1e6, static_cast<double>(total) / 1e6,
                  total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0,
                  s > 0 ? static_cast<double>(done) / 1e6 / s : 0.0, static_cast<long long>(docs), static_cast<long long>(tokens));
    std::cout << line << std::flush;
  }
};

}  // namespace

CorpusPrepareResult prepare_corpus(const CorpusPrepareOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  ST_CHECK(!o.inputs.empty(), UsageError, "prepare: --input is empty");
  ST_CHECK(!o.out_dir.empty(), UsageError, "prepare: --input needs --out DIR");
  ST_CHECK(o.shard_tokens >= 1 && o.shard_tokens <= INT32_MAX, UsageError,
           "prepare: --shard-tokens " << o.shard_tokens << " must be in [1, " << INT32_MAX << "] (the token file's int32 count)");
  ST_CHECK(o.threads >= 0, UsageError, "prepare: --threads " << o.threads << " must be >= 0 (0: every core)");
  ST_CHECK(o.val_fraction >= 0 && o.val_fraction < 1, UsageError, "prepare: --val-fraction " << o.val_fraction << " must be in [0, 1)");
  ST_CHECK(o.val_docs >= 0, UsageError, "prepare: --val-docs " << o.val_docs << " must be >= 0");
  ST_CHECK(o.val_docs == 0 || o.val_fraction == 0, UsageError, "prepare: give --val-fraction or --val-docs, not both");
  ST_CHECK(o.bos_id >= -2 && o.eos_id >= -2, UsageError, "prepare: --bos-id / --eos-id must be an id >= 0, or -1 (none)");
  if (o.tokenizer == "gpt2" && o.vocab.empty())
    ST_THROW(UsageError, "prepare: --tokenizer gpt2 needs --vocab DIR (holding vocab.json and merges.txt)");
  const TextCodec codec(o.tokenizer, o.vocab);  // UsageError / IOError naming the tokenizer's files
  int64_t bos = -1, eos = -1, id_bound = codec.vocab_size();
  tokenizer_specials(o, codec, bos, eos, id_bound);

  const std::vector<std::string> files = list_corpus_files(o.inputs);
  const int64_t D = count_documents(files);
  if (D == 0) ST_THROW(UsageError, "prepare: the inputs hold no document (empty corpus): " << o.inputs.front() << (o.inputs.size() > 1 ? ", ..." : ""));
  const int64_t val_n = o.val_docs > 0 ? o.val_docs : std::llround(o.val_fraction * static_cast<double>(D));
  ST_CHECK(val_n < D, UsageError, "prepare: a validation split of " << val_n << " of the " << D << " documents leaves none to train on");

  runtime::CorpusIndex base;
  base.tokenizer = o.tokenizer;
  base.vocab_size = std::max({id_bound, bos + 1, eos + 1});
  base.bos_id = bos;
  base.eos_id = eos;
  base.token_version = base.vocab_size > 65536 ? runtime::kTokenVersion32 : runtime::kTokenVersion;
  base.shard_tokens = o.shard_tokens;

  clear_prepared_dir(o.out_dir, o.force);
  const std::string val_dir = (fs::path(o.out_dir) / "val").string();
  if (val_n > 0) fs::create_directories(val_dir);
  ShardWriter train(o.out_dir, base, o.on_shard);
  std::unique_ptr<ShardWriter> val;
  if (val_n > 0) val = std::make_unique<ShardWriter>(val_dir, base, o.on_shard);

  CorpusPrepareResult r;
  r.threads = o.threads > 0 ? o.threads : std::max<int64_t>(1, std::thread::hardware_concurrency());
  Progress progress;
  progress.on = o.progress;
  for (const auto& f : files) {
    std::error_code ec;
    progress.total += fs::file_size(f, ec);
  }
  DocumentReader reader(files);
  std::vector<RawDocument> docs;
  int64_t d = 0;  // corpus-wide document index
  uint64_t text_bytes = 0;
  while (true) {
    docs.clear();
    if (!reader.next_batch(docs, std::max<size_t>(1, o.batch_bytes))) break;
    // every document alone, on the threads; written below in order (the same bytes for any count)
    std::vector<std::vector<uint32_t>> out(docs.size());
    std::vector<std::exception_ptr> err(docs.size());
    std::vector<uint64_t> bytes(docs.size());
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i; (i = next.fetch_add(1)) < docs.size();) {
        try {
          const std::string text = document_text(docs[i], o.text_field);
          bytes[i] = text.size();
          const std::vector<int64_t> ids = codec.encode_plain(text);
          std::vector<uint32_t>& t = out[i];
          t.reserve(ids.size() + 2);
          if (bos >= 0) t.push_back(static_cast<uint32_t>(bos));
          t.insert(t.end(), ids.begin(), ids.end());
          if (eos >= 0) t.push_back(static_cast<uint32_t>(eos));
        } catch (...) {
          err[i] = std::current_exception();
        }
      }
    };
    std::vector<std::thread> pool;
    const size_t n_threads = std::min<size_t>(static_cast<size_t>(r.threads), docs.size());
    for (size_t k = 1; k < n_threads; ++k) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    for (size_t i = 0; i < docs.size(); ++i, ++d) {
      if (err[i]) std::rethrow_exception(err[i]);  // the first bad document in input order
      text_bytes += bytes[i];
      const bool to_val = val && (d + 1) * val_n / D > d * val_n / D;
      (to_val ? *val : train).add_document(out[i]);
    }
    progress.show(reader.bytes_read(), train.tokens() + (val ? val->tokens() : 0), d);
  }
  if (text_bytes == 0) ST_THROW(UsageError, "prepare: the " << D << " documents hold no text (empty corpus)");
  progress.show(reader.bytes_read(), train.tokens() + (val ? val->tokens() : 0), d, true);
  if (progress.on) std::cout << "\n";
  if (val) r.val = val->finish();
  r.train = train.finish();  // DIR/index.json last: the corpus is whole once it exists
  r.text_bytes = text_bytes;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace st::launch
