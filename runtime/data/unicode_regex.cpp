// UnicodeRegex (runtime/data/unicode_regex.h) over PCRE2's 8-bit library.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "runtime/data/unicode_regex.h"

#include <pcre2.h>

#include "runtime/data/utf8.h"
#include "tensor/error.h"

namespace st::runtime {

UnicodeRegex::UnicodeRegex(const std::string& pattern, bool literal, const std::string& what) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE at = 0;
  // (PCRE2_LITERAL allows no PCRE2_UCP: a literal has no classes for it to change)
  const uint32_t options = PCRE2_UTF | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  ST_CHECK(utf8_valid(pattern), ValueError, what << ": the pattern is not UTF-8");
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err, &at, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    ST_THROW(ValueError, what << ": regex " << pattern << " does not compile (PCRE2: " << reinterpret_cast<char*>(msg)
                              << " at offset " << at << ")");
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // no JIT on this platform: the interpreter runs it
  code_ = code;
}

UnicodeRegex::~UnicodeRegex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void UnicodeRegex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  // one match block per thread and pattern size (two pairs: the whole match is all we read)
  struct Data {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    ~Data() { pcre2_match_data_free(md); }
  };
  thread_local Data data;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data.md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    ST_CHECK(rc >= 0, ValueError, "regex " << pattern_ << ": PCRE2 match error " << rc);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      pos = e;
    } else {  // empty: skip one character
      if (b >= text.size()) return;
      pos = b + utf8_char_len(static_cast<unsigned char>(text[b]));
    }
  }
}

}  // namespace st::runtime
