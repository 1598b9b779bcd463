// UTF-8 for the tokenizers: invalid input made valid the way Python's
// bytes.decode("utf-8", errors="replace"), WHATWG's TextDecoder and Rust's from_utf8_lossy do it
// (each maximal invalid subpart of a sequence becomes one U+FFFD, Unicode §3.9 "substitution of
// maximal subparts"), code points read and written, and Unicode White_Space.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace st::runtime {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// `text` with every maximal invalid subpart replaced by U+FFFD; valid text comes back unchanged.
std::string utf8_replace_invalid(std::string_view text);
// True when `text` is well-formed UTF-8 (no surrogates, no overlongs, nothing past U+10FFFF).
bool utf8_valid(std::string_view text);
// The length in bytes of the character starting with byte `lead` of well-formed UTF-8.
inline size_t utf8_char_len(unsigned char lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }
// The code point at s[i] of well-formed UTF-8; *len gets its byte length.
char32_t utf8_decode_at(std::string_view s, size_t i, size_t* len);
void utf8_append(std::string& out, char32_t cp);
// Unicode's White_Space property (Rust's char::is_whitespace).
bool unicode_white_space(char32_t cp);

}  // namespace st::runtime
