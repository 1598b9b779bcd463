// The documents of `shardtrain prepare --input ...` (docs/launch.md, "A corpus of documents"):
// each input is a file, a directory (every file under it ending .txt, .text, .md or .jsonl,
// recursively) or a glob (its matches, any name); the files are taken in byte order of their paths
// (each directory's or glob's files sorted; the inputs in the order given). A file ending .jsonl is
// one document per non-blank line (the string field --text-field of a JSON object); any other
// file is one document (its bytes as they are).
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace st::launch {

// The files the inputs name, in document order; UsageError naming an input that matches nothing.
std::vector<std::string> list_corpus_files(const std::vector<std::string>& inputs);

bool is_jsonl(const std::string& path);

// A document before tokenization: the whole text, or a JSONL line still to be parsed (by a worker).
struct RawDocument {
  std::string bytes;
  bool json = false;
  std::string file;
  int64_t line = 0;  // 1-based, JSONL only
};

// Its text: `bytes`, or the string `field` of the JSON object on the line; UsageError naming
// file:line for a line that is not JSON, not an object, or lacks the field as a string.
std::string document_text(const RawDocument& d, const std::string& field);

// Reads the files' documents in order, a batch at a time.
class DocumentReader {
 public:
  explicit DocumentReader(std::vector<std::string> files);
  // Appends documents to `out` until about `max_bytes` of them are read or the files end; false
  // when nothing was left. IOError naming a file that cannot be read.
  bool next_batch(std::vector<RawDocument>& out, size_t max_bytes);
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  std::vector<std::string> files_;
  size_t next_file_ = 0;
  std::ifstream jsonl_;  // the JSONL file being read, if any
  std::string jsonl_name_;
  int64_t line_ = 0;
  uint64_t bytes_read_ = 0;
};

// The number of documents the files hold (text files: 1 each; JSONL: non-blank lines).
int64_t count_documents(const std::vector<std::string>& files);

}  // namespace st::launch
