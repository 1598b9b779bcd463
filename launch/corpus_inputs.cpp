// prepare's inputs: files, directories and globs → documents (launch/corpus_inputs.h).
#include "launch/corpus_inputs.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "launch/byte_tokenizer.h"
#include "launch/options.h"
#include "tensor/error.h"

namespace st::launch {
namespace fs = std::filesystem;
namespace {

bool corpus_extension(const fs::path& p) {
  const std::string e = p.extension().string();
  return e == ".txt" || e == ".text" || e == ".md" || e == ".jsonl";
}

bool blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}

}  // namespace

bool is_jsonl(const std::string& path) { return fs::path(path).extension() == ".jsonl"; }

std::vector<std::string> list_corpus_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    std::vector<std::string> found;
    if (fs::is_directory(in, ec)) {
      for (auto it = fs::recursive_directory_iterator(in, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        if (it->is_regular_file(ec) && corpus_extension(it->path())) found.push_back(it->path().string());
      if (ec) ST_THROW(IOError, "prepare: --input " << in << ": cannot list: " << ec.message());
      if (found.empty()) ST_THROW(UsageError, "prepare: --input " << in << ": no .txt, .text, .md or .jsonl file under it");
    } else if (fs::is_regular_file(in, ec)) {
      found.push_back(in);
    } else if (in.find_first_of("*?[") != std::string::npos) {
      glob_t g{};
      if (::glob(in.c_str(), 0, nullptr, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; ++i)
          if (fs::is_regular_file(g.gl_pathv[i], ec)) found.emplace_back(g.gl_pathv[i]);
      ::globfree(&g);
      if (found.empty()) ST_THROW(UsageError, "prepare: --input " << in << ": the glob matches no file");
    } else {
      ST_THROW(UsageError, "prepare: --input " << in << ": no such file or directory");
    }
    std::sort(found.begin(), found.end());  // byte order, whatever the locale
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

std::string document_text(const RawDocument& d, const std::string& field) {
  if (!d.json) return d.bytes;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(d.bytes);
  } catch (const nlohmann::json::exception& e) {
    ST_THROW(UsageError, "prepare: " << d.file << ":" << d.line << ": not JSON (" << e.what() << ")");
  }
  if (!j.is_object()) ST_THROW(UsageError, "prepare: " << d.file << ":" << d.line << ": not a JSON object");
  const auto it = j.find(field);
  if (it == j.end()) ST_THROW(UsageError, "prepare: " << d.file << ":" << d.line << ": no field \"" << field << "\" (--text-field)");
  if (!it->is_string())
    ST_THROW(UsageError, "prepare: " << d.file << ":" << d.line << ": field \"" << field << "\" is " << it->type_name() << ", not a string");
  return it->get<std::string>();
}

DocumentReader::DocumentReader(std::vector<std::string> files) : files_(std::move(files)) {}

bool DocumentReader::next_batch(std::vector<RawDocument>& out, size_t max_bytes) {
  size_t got = 0;
  bool any = false;
  while (got < max_bytes) {
    if (jsonl_.is_open()) {
      std::string line;
      if (!std::getline(jsonl_, line)) {
        if (jsonl_.bad()) ST_THROW(IOError, "prepare: " << jsonl_name_ << ": read failed");
        jsonl_.close();
        continue;
      }
      ++line_;
      bytes_read_ += line.size() + 1;
      got += line.size() + 1;
      if (blank(line)) continue;
      out.push_back({std::move(line), true, jsonl_name_, line_});
      any = true;
      continue;
    }
    if (next_file_ == files_.size()) break;
    const std::string& f = files_[next_file_++];
    if (is_jsonl(f)) {
      jsonl_.clear();
      jsonl_.open(f, std::ios::binary);
      if (!jsonl_) ST_THROW(IOError, "prepare: cannot open " << f);
      jsonl_name_ = f;
      line_ = 0;
      continue;
    }
    std::string text = read_text_file(f);  // IOError naming it
    bytes_read_ += text.size();
    got += text.size() + 1;
    out.push_back({std::move(text), false, f, 0});
    any = true;
  }
  return any || got >= max_bytes;  // a batch of blank lines only: more may follow
}

int64_t count_documents(const std::vector<std::string>& files) {
  int64_t n = 0;
  for (const auto& f : files) {
    if (!is_jsonl(f)) {
      ++n;
      continue;
    }
    std::ifstream in(f, std::ios::binary);
    if (!in) ST_THROW(IOError, "prepare: cannot open " << f);
    for (std::string line; std::getline(in, line);)
      if (!blank(line)) ++n;
  }
  return n;
}

}  // namespace st::launch
