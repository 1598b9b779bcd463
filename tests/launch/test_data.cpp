// prepare (text → byte tokens → .bin → the same text), prepare for a corpus (documents from
// text / JSONL files, directories and globs → shards + .idx + index.json, checked token for token;
// the same bytes for 1 and 3 threads; killed mid-way and run again = one unbroken run; the
// validation split; the refusals naming file:line) and the built-in corpus (real Debian text,
// cached once, atomically).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "launch/byte_tokenizer.h"
#include "launch/commands.h"
#include "launch/corpus.h"
#include "launch/corpus_prepare.h"
#include "launch/options.h"
#include "runtime/data/corpus_index.h"
#include "runtime/data/data_spec.h"
#include "runtime/data/token_data.h"

using namespace st;
using namespace st::launch;
namespace fs = std::filesystem;

namespace {
fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("st_launch_data_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
}  // namespace

TEST(Prepare, RoundTrip) {
  fs::path d = temp_dir("prepare");
  std::string text = "Hello, world!\nbytes \x01\xff\x80 and UTF-8: \xc3\xa9t\xc3\xa9\n";
  std::ofstream((d / "in.txt").string(), std::ios::binary) << text;
  int64_t n = prepare_tokens((d / "in.txt").string(), (d / "out.bin").string(), "byte");
  EXPECT_EQ(n, static_cast<int64_t>(text.size()));
  runtime::TokenData td((d / "out.bin").string());
  ASSERT_EQ(td.num_tokens(), n);
  const std::vector<uint32_t> ids = td.tokens(0, n);
  std::vector<uint16_t> toks(ids.begin(), ids.end());
  EXPECT_EQ(toks[0], 'H');
  EXPECT_EQ(toks[text.find('\xff')], 255);
  EXPECT_EQ(byte_decode(toks), text);
  EXPECT_THROW(prepare_tokens((d / "in.txt").string(), (d / "x.bin").string(), "gpt2"), UsageError);
  EXPECT_THROW(prepare_tokens((d / "missing.txt").string(), (d / "x.bin").string(), "byte"), IOError);
  std::ofstream((d / "empty.txt").string());
  EXPECT_THROW(prepare_tokens((d / "empty.txt").string(), (d / "x.bin").string(), "byte"), UsageError);
  EXPECT_THROW(byte_decode({300}), ValueError);
}

TEST(Corpus, BuiltinIsRealTextCachedOnce) {
  fs::path cache = temp_dir("cache");
  ::setenv("XDG_CACHE_HOME", cache.c_str(), 1);
  EXPECT_EQ(corpus_cache_dir(), (cache / "shardtrain").string());
  std::string path = builtin_corpus_path();
  EXPECT_EQ(fs::path(path).parent_path(), cache / "shardtrain");
  runtime::TokenData td(path);
  // the sources that exist, concatenated with blank lines between them
  std::string expected;
  for (const auto& f : builtin_corpus_sources())
    if (fs::is_regular_file(f)) expected += read_text_file(f) + "\n\n";
  ASSERT_EQ(td.num_tokens(), static_cast<int64_t>(expected.size()));
  EXPECT_GT(td.num_tokens(), 200000);  // a few hundred KB of English
  const std::vector<uint32_t> ids = td.tokens(0, td.num_tokens());
  std::string text = byte_decode(std::vector<uint16_t>(ids.begin(), ids.end()));
  EXPECT_EQ(text, expected);
  EXPECT_NE(text.find("GNU GENERAL PUBLIC LICENSE"), std::string::npos);
  EXPECT_LT(td.max_token(), 256);
  // second call: same file, not rewritten
  auto mtime = fs::last_write_time(path);
  EXPECT_EQ(builtin_corpus_path(), path);
  EXPECT_EQ(fs::last_write_time(path), mtime);
  // no temporary left behind
  int files = 0;
  for (const auto& e : fs::directory_iterator(cache / "shardtrain")) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  ::unsetenv("XDG_CACHE_HOME");
}

namespace {

void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p.string(), std::ios::binary) << text;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p.string(), std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Every file under `dir` (relative name → bytes).
std::map<std::string, std::string> tree(const fs::path& dir) {
  std::map<std::string, std::string> t;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) t[fs::relative(e.path(), dir).string()] = bytes_of(e.path());
  return t;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A corpus of `n` JSONL documents of varied lengths (0 … 60 bytes) in two files and a text file.
fs::path many_documents(const std::string& name, int n) {
  fs::path in = temp_dir(name) / "in";
  std::string a, b;
  for (int i = 0; i < n; ++i) {
    std::string text;
    for (int k = 0; k < (i * 37) % 61; ++k) text += static_cast<char>('a' + (i + k) % 26);
    (i % 2 ? b : a) += "{\"text\": \"" + text + "\", \"id\": " + std::to_string(i) + "}\n";
  }
  put(in / "a.jsonl", a);
  put(in / "b.jsonl", b);
  put(in / "c.txt", "a text file: one document\n");
  return in;
}

}  // namespace

TEST(PrepareCorpus, DocumentsShardsAndIndex) {
  const fs::path d = temp_dir("corpus");
  put(d / "in/a.txt", "Hello");
  put(d / "in/b.jsonl", "{\"text\": \"ab\"}\n\n{\"text\": \"\", \"x\": 1}\r\n{\"text\": \"xyz\"}");  // a blank line, CRLF, no final newline
  put(d / "in/sub/c.md", "Q");
  put(d / "in/ignored.bin", "not a document");
  CorpusPrepareOptions o;
  o.inputs = {(d / "in").string()};
  o.out_dir = (d / "out").string();
  o.eos_id = 0;  // byte has no EOS of its own
  o.shard_tokens = 6;
  const CorpusPrepareResult r = prepare_corpus(o);
  // a.txt, b.jsonl's three documents, sub/c.md: H e l l o 0 | a b 0 0 x y | z 0 Q 0
  const std::vector<uint32_t> want = {'H', 'e', 'l', 'l', 'o', 0, 'a', 'b', 0, 0, 'x', 'y', 'z', 0, 'Q', 0};
  EXPECT_EQ(r.train.documents, 5);
  EXPECT_EQ(r.train.tokens, 16);
  ASSERT_EQ(r.train.shards.size(), 3u);
  const runtime::CorpusIndex idx = runtime::CorpusIndex::read(o.out_dir);
  EXPECT_EQ(idx.to_json(), r.train.to_json());
  EXPECT_EQ(idx.vocab_size, 256);
  EXPECT_EQ(idx.eos_id, 0);
  EXPECT_EQ(idx.bos_id, -1);
  EXPECT_EQ(idx.token_version, 1);
  // documents start at stream tokens 0, 6, 9 (the empty one: its EOS), 10, 14
  const std::vector<std::vector<int64_t>> starts = {{0}, {0, 3, 4}, {2}};
  const std::vector<int64_t> first_doc = {0, 1, 4}, sizes = {6, 6, 4};
  std::vector<uint32_t> got;
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(idx.shards[k].file, "shard_00000" + std::to_string(k) + ".bin");
    EXPECT_EQ(idx.shards[k].tokens, sizes[k]);
    EXPECT_EQ(idx.shards[k].first_document, first_doc[k]);
    EXPECT_EQ(idx.shards[k].documents, static_cast<int64_t>(starts[k].size()));
    EXPECT_EQ(runtime::read_doc_index((fs::path(o.out_dir) / idx.shards[k].doc_index).string()), starts[k]);
    runtime::TokenData td((fs::path(o.out_dir) / idx.shards[k].file).string());
    const auto t = td.tokens(0, td.num_tokens());
    got.insert(got.end(), t.begin(), t.end());
  }
  EXPECT_EQ(got, want);
  // train --data reads the directory as that stream: sequence 2 of T 5 is tokens 10 … 15
  const auto src = runtime::open_token_source(o.out_dir);
  const runtime::TokenBatch b = src->read(2, 1, 5);
  for (int64_t t = 0; t < 5; ++t) EXPECT_EQ(b.inputs.data<int64_t>()[t], want[static_cast<size_t>(10 + t)]);
  // ids past 65 535: a BOS of 70 000 makes every shard uint32 (version 2), read back as written
  o.out_dir = (d / "wide").string();
  o.bos_id = 70000;
  const CorpusPrepareResult w = prepare_corpus(o);
  EXPECT_EQ(w.train.token_version, 2);
  EXPECT_EQ(w.train.vocab_size, 70001);
  for (const auto& s : w.train.shards) EXPECT_EQ(runtime::TokenData((fs::path(o.out_dir) / s.file).string()).token_bytes(), 4);
  const runtime::TokenBatch wb = runtime::open_token_source(o.out_dir)->read(0, 1, 20);
  EXPECT_EQ(wb.inputs.data<int64_t>()[0], 70000);
  EXPECT_EQ(wb.inputs.data<int64_t>()[1], 'H');
  EXPECT_EQ(wb.inputs.data<int64_t>()[7], 70000);  // H e l l o 0 | BOS a b ...
}

TEST(PrepareCorpus, SameBytesForAnyThreadCount) {
  const fs::path in = many_documents("threads", 400);
  CorpusPrepareOptions o;
  o.inputs = {(in / "*.jsonl").string(), (in / "c.txt").string()};
  o.eos_id = 10;
  o.shard_tokens = 1000;
  o.batch_bytes = 700;  // many batches
  o.val_fraction = 0.1;
  o.threads = 1;
  o.out_dir = (in.parent_path() / "t1").string();
  const CorpusPrepareResult one = prepare_corpus(o);
  o.threads = 3;
  o.out_dir = (in.parent_path() / "t3").string();
  prepare_corpus(o);
  EXPECT_GT(one.train.shards.size(), 3u);
  const auto t1 = tree(in.parent_path() / "t1"), t3 = tree(in.parent_path() / "t3");
  EXPECT_EQ(t1.size(), t3.size());
  EXPECT_TRUE(t1 == t3) << "1 and 3 threads wrote different bytes";
  // the validation split: N = round(0.1 · 401) = 40 documents, d in val/ when ⌊(d+1)·N/D⌋ > ⌊d·N/D⌋
  EXPECT_EQ(one.val.documents, 40);
  EXPECT_EQ(one.train.documents, 361);
  const runtime::CorpusIndex val = runtime::CorpusIndex::read((in.parent_path() / "t1" / "val").string());
  EXPECT_EQ(val.documents, 40);
  // val/'s first document is d = 10, the first d with (d+1)·40 ≥ 401; a.jsonl (read first) holds the
  // even i, so d = 10 is its 11th line, i = 20, of (20·37) mod 61 = 8 letters
  std::string text;
  for (int k = 0; k < (20 * 37) % 61; ++k) text += static_cast<char>('a' + (20 + k) % 26);
  ASSERT_EQ(text.size(), 8u);
  const auto first = runtime::open_token_source((in.parent_path() / "t1" / "val").string())->read(0, 1, static_cast<int64_t>(text.size()));
  for (size_t k = 0; k < text.size(); ++k) EXPECT_EQ(first.inputs.data<int64_t>()[k], text[k]);
}

TEST(PrepareCorpus, KilledAndRunAgainEqualsOneRun) {
  const fs::path in = many_documents("kill", 300);
  CorpusPrepareOptions o;
  o.inputs = {in.string()};
  o.eos_id = 10;
  o.shard_tokens = 500;
  o.batch_bytes = 1000;
  o.val_docs = 20;
  o.out_dir = (in.parent_path() / "whole").string();
  prepare_corpus(o);
  o.out_dir = (in.parent_path() / "killed").string();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // the child: SIGKILL once its 4th shard is in place
    int shards = 0;
    o.on_shard = [&shards] {
      if (++shards == 4) std::raise(SIGKILL);
    };
    try {
      prepare_corpus(o);
    } catch (...) {
    }
    ::_exit(0);  // not killed: the test fails below
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  EXPECT_FALSE(fs::exists(fs::path(o.out_dir) / "index.json"));  // not a corpus
  EXPECT_NE(error_of([&] { runtime::open_token_source(o.out_dir); }).find("index.json"), std::string::npos);
  prepare_corpus(o);  // the leftovers cleared, written anew
  EXPECT_TRUE(tree(in.parent_path() / "whole") == tree(o.out_dir)) << "a killed prepare run again differs from one run";
  // a finished corpus is kept unless --force; a foreign file is never deleted
  EXPECT_NE(error_of([&] { prepare_corpus(o); }).find("already holds a prepared corpus (index.json): --force 1"), std::string::npos);
  o.force = true;
  prepare_corpus(o);
  EXPECT_TRUE(tree(in.parent_path() / "whole") == tree(o.out_dir));
  o.val_docs = 0;  // no split this time: the old val/ goes too
  prepare_corpus(o);
  EXPECT_FALSE(fs::exists(fs::path(o.out_dir) / "val"));
  put(fs::path(o.out_dir) / "notes.txt", "mine");
  const std::string m = error_of([&] { prepare_corpus(o); });
  EXPECT_NE(m.find((fs::path(o.out_dir) / "notes.txt").string() + ", which prepare did not write"), std::string::npos) << m;
  EXPECT_TRUE(fs::exists(fs::path(o.out_dir) / "index.json"));
}

TEST(PrepareCorpus, RefusalsNameTheInput) {
  const fs::path d = temp_dir("refuse");
  CorpusPrepareOptions o;
  o.out_dir = (d / "out").string();
  put(d / "bad.jsonl", "{\"text\": \"ok\"}\n\n{\"text\": oops}\n");
  o.inputs = {(d / "bad.jsonl").string()};
  std::string m = error_of([&] { prepare_corpus(o); });
  EXPECT_NE(m.find((d / "bad.jsonl").string() + ":3: not JSON"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(d / "out" / "index.json"));
  put(d / "field.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"x\"}\n");
  o.inputs = {(d / "field.jsonl").string()};
  m = error_of([&] { prepare_corpus(o); });
  EXPECT_NE(m.find((d / "field.jsonl").string() + ":2: no field \"text\" (--text-field)"), std::string::npos) << m;
  o.text_field = "body";
  m = error_of([&] { prepare_corpus(o); });
  EXPECT_NE(m.find((d / "field.jsonl").string() + ":1: no field \"body\""), std::string::npos) << m;
  o.text_field = "text";
  put(d / "blank.jsonl", "\n  \n");
  o.inputs = {(d / "blank.jsonl").string()};
  EXPECT_NE(error_of([&] { prepare_corpus(o); }).find("no document (empty corpus)"), std::string::npos);
  put(d / "empty.txt", "");
  o.inputs = {(d / "empty.txt").string()};
  EXPECT_NE(error_of([&] { prepare_corpus(o); }).find("hold no text (empty corpus)"), std::string::npos);
  EXPECT_FALSE(fs::exists(d / "out" / "index.json"));
  o.inputs = {(d / "nothing*.txt").string()};
  EXPECT_NE(error_of([&] { prepare_corpus(o); }).find((d / "nothing*.txt").string() + ": the glob matches no file"), std::string::npos);
  o.inputs = {(d / "bad.jsonl").string()};
  o.val_docs = 5;
  EXPECT_NE(error_of([&] { prepare_corpus(o); }).find("leaves none to train on"), std::string::npos);
}
