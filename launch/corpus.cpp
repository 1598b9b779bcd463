// Built-in corpus: Debian's license texts → byte tokens → cached .bin (see corpus.h).
#include "launch/corpus.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "launch/byte_tokenizer.h"
#include "runtime/data/token_data.h"
#include "tensor/error.h"

namespace st::launch {
namespace fs = std::filesystem;

const std::vector<std::string>& builtin_corpus_sources() {
  static const std::vector<std::string> files = [] {
    std::vector<std::string> v;
    for (const char* n : {"GPL-3", "GPL-2", "GPL-1", "LGPL-2.1", "LGPL-2", "LGPL-3", "GFDL-1.3", "GFDL-1.2", "Apache-2.0",
                          "MPL-2.0", "MPL-1.1", "Artistic", "CC0-1.0", "BSD"})
      v.push_back(std::string("/usr/share/common-licenses/") + n);
    return v;
  }();
  return files;
}

std::string corpus_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "shardtrain").string();
  if (const char* h = std::getenv("HOME"); h && *h) return (fs::path(h) / ".cache" / "shardtrain").string();
  return "/tmp/shardtrain-" + std::to_string(::getuid());
}

std::string builtin_corpus_path() {
  std::string text;
  for (const auto& f : builtin_corpus_sources()) {
    std::error_code ec;
    if (!fs::is_regular_file(f, ec)) continue;
    text += read_text_file(f);
    text += "\n\n";
  }
  if (text.empty()) {
    std::string list;
    for (const auto& f : builtin_corpus_sources()) list += " " + f;
    ST_THROW(IOError, "built-in corpus: none of these texts exists (Debian package base-files):" << list
                                                                                                 << "; pass --data FILE.bin");
  }
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the text
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  char name[64];
  std::snprintf(name, sizeof(name), "corpus-byte-%016llx.bin", static_cast<unsigned long long>(h));
  const fs::path dir = corpus_cache_dir();
  const fs::path path = dir / name;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return path.string();
  fs::create_directories(dir, ec);
  if (ec) ST_THROW(IOError, "built-in corpus: cannot create cache directory " << dir.string() << ": " << ec.message());
  runtime::write_token_file(path.string(), byte_encode(text));
  return path.string();
}

}  // namespace st::launch
