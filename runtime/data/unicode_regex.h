// UnicodeRegex: a pattern of a tokenizer.json (Split's Regex, GPT-2's and Llama 3's pre-token
// patterns) run by PCRE2 (Debian's libpcre2-8) with PCRE2_UTF | PCRE2_UCP, so \p{L}, \p{N}, \s
// and (?i:...) are Unicode's, and JIT-compiled where PCRE2 has a JIT. Hugging Face runs these
// patterns with Oniguruma; the two agree on the patterns in use (tests/runtime/data checks the
// fixture's texts). Subjects must be well-formed UTF-8 (runtime/data/utf8.h makes them so).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace st::runtime {

class UnicodeRegex {
 public:
  // literal: the pattern is a plain string (Split's {"String": ...}). ValueError naming `what`
  // and PCRE2's message with its offset for a pattern that does not compile.
  UnicodeRegex(const std::string& pattern, bool literal, const std::string& what);
  ~UnicodeRegex();
  UnicodeRegex(const UnicodeRegex&) = delete;
  UnicodeRegex& operator=(const UnicodeRegex&) = delete;

  // The non-empty matches of `text`, left to right, as [begin, end) byte offsets (an empty match
  // moves the search on by one character, as Oniguruma's find_iter does). Thread-safe.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
};

}  // namespace st::runtime
