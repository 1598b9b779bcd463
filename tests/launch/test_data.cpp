// prepare (text → byte tokens → .bin → the same text) and the built-in corpus (real Debian
// text, cached once, atomically).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "launch/byte_tokenizer.h"
#include "launch/commands.h"
#include "launch/corpus.h"
#include "launch/options.h"
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
