// HfNormalizer and HfPreTokenizer (runtime/data/hf_pretokenizer.h).
#include "runtime/data/hf_pretokenizer.h"

#include <array>
#include <nlohmann/json.hpp>
#include <utility>

#include "runtime/data/unicode_regex.h"
#include "runtime/data/utf8.h"
#include "tensor/error.h"

namespace st::runtime {
namespace {

// GPT-2's pre-token pattern, the one ByteLevel(use_regex true) runs (pre_tokenizers/byte_level.rs).
const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct ByteLevelMap {
  std::array<std::string, 256> to_char;
  std::array<int, 512> from_cp;  // code points below 512 only
  ByteLevelMap() {
    from_cp.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      utf8_append(to_char[b], cp);
      from_cp[cp] = b;
    }
  }
};
const ByteLevelMap& byte_map() {
  static const ByteLevelMap m;
  return m;
}

// Characters that NFC leaves alone and that compose with no neighbour, by whole ranges: below
// U+0300 (the combining marks begin there), CJK symbols and kana without the combining voiced
// marks U+3099 / U+309A, CJK unified ideographs (not the compatibility ones at U+F900, which NFC
// maps), Hangul syllables (conjoining jamo excluded: an LV syllable takes a trailing jamo), the
// variation selectors, fullwidth forms, ZWJ / ZWNJ, and the emoji planes (no canonical mappings).
// Text made only of these is its own NFC; other text is refused rather than guessed.
bool nfc_stable(char32_t c) {
  return c < 0x300 || (c >= 0x3000 && c <= 0x3098) || (c >= 0x309B && c <= 0x30FF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7A3) || (c >= 0xFE00 && c <= 0xFE0F) ||
         (c >= 0xFF01 && c <= 0xFF60) || c == 0x200C || c == 0x200D || (c >= 0x1F000 && c <= 0x1FAFF);
}

std::string type_of(const nlohmann::json& j, const std::string& file, const char* what) {
  ST_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), ValueError,
           file << ": a " << what << " without a \"type\"");
  return j["type"].get<std::string>();
}

// A {"String": s} or {"Regex": r} pattern; *literal says which.
std::string pattern_of(const nlohmann::json& j, const std::string& file, const std::string& where, bool* literal) {
  ST_CHECK(j.contains("pattern") && j["pattern"].is_object(), ValueError, file << ": " << where << " has no pattern");
  const auto& p = j["pattern"];
  if (p.contains("String")) {
    *literal = true;
    return p["String"].get<std::string>();
  }
  ST_CHECK(p.contains("Regex"), ValueError, file << ": " << where << "'s pattern is neither String nor Regex");
  *literal = false;
  return p["Regex"].get<std::string>();
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty() || s.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t i = 0;
  for (size_t k; (k = s.find(from, i)) != std::string::npos; i = k + from.size()) out.append(s, i, k - i).append(to);
  out.append(s, i, std::string::npos);
  s.swap(out);
}

// Cuts `in` at the spans (begin, end, is_match), kept as `behavior` says (the library's
// NormalizedString::split); empty results are dropped.
void split_by(const Piece& in, std::vector<std::pair<std::pair<size_t, size_t>, bool>>& spans, SplitBehavior behavior,
              std::vector<Piece>& out) {
  std::vector<std::pair<size_t, size_t>> keep;
  keep.reserve(spans.size());
  bool previous = false;
  switch (behavior) {
    case SplitBehavior::removed:
      for (auto& [o, m] : spans) if (!m) keep.push_back(o);
      break;
    case SplitBehavior::isolated:
      for (auto& [o, m] : spans) keep.push_back(o);
      break;
    case SplitBehavior::merged_with_previous:
      for (auto& [o, m] : spans) {
        if (m && !previous && !keep.empty()) keep.back().second = o.second;
        else keep.push_back(o);
        previous = m;
      }
      break;
    case SplitBehavior::merged_with_next:
      for (size_t k = spans.size(); k-- > 0;) {
        auto& [o, m] = spans[k];
        if (m && !previous && !keep.empty()) keep.back().first = o.first;
        else keep.push_back(o);
        previous = m;
      }
      std::reverse(keep.begin(), keep.end());
      break;
    case SplitBehavior::contiguous:
      for (auto& [o, m] : spans) {
        if (m == previous && !keep.empty()) keep.back().second = o.second;
        else keep.push_back(o);
        previous = m;
      }
      break;
  }
  for (auto [b, e] : keep) {
    if (e == b) continue;
    out.push_back(Piece{in.text.substr(b, e - b), -1, in.at_start && b == 0});
  }
}

// The spans of `text` by a regex: its matches and the gaps between them, in order.
void spans_of(const UnicodeRegex& re, const std::string& text, bool invert,
              std::vector<std::pair<std::pair<size_t, size_t>, bool>>& spans) {
  thread_local std::vector<std::pair<size_t, size_t>> matches;
  matches.clear();
  spans.clear();
  re.find_all(text, matches);
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (b > prev) spans.push_back({{prev, b}, invert});
    spans.push_back({{b, e}, !invert});
    prev = e;
  }
  if (prev < text.size()) spans.push_back({{prev, text.size()}, invert});
}

}  // namespace

const std::string& byte_level_char(unsigned char b) { return byte_map().to_char[b]; }
int byte_level_byte(char32_t cp) { return cp < 512 ? byte_map().from_cp[cp] : -1; }

// ---- normalizer ---------------------------------------------------------------------------------

HfNormalizer::HfNormalizer(const nlohmann::json& json, const std::string& file) {
  if (!json.is_null()) add(json, file);
}

void HfNormalizer::add(const nlohmann::json& j, const std::string& file) {
  const std::string type = type_of(j, file, "normalizer");
  if (type == "Sequence") {
    for (const auto& n : j.at("normalizers")) add(n, file);
  } else if (type == "Prepend") {
    steps_.push_back({Step::prepend, j.at("prepend").get<std::string>(), ""});
  } else if (type == "Replace") {
    bool literal = false;
    const std::string p = pattern_of(j, file, "normalizer Replace", &literal);
    ST_CHECK(literal, ValueError, file << ": normalizer Replace with a Regex pattern is not supported (String patterns are)");
    steps_.push_back({Step::replace, p, j.at("content").get<std::string>()});
  } else if (type == "NFC") {
    steps_.push_back({Step::nfc, "", ""});
  } else {
    ST_THROW(ValueError, file << ": normalizer " << type << " is not supported (supported: Sequence, Prepend, Replace, NFC)");
  }
}

void HfNormalizer::apply(std::string& text) const {
  for (const Step& s : steps_) {
    switch (s.kind) {
      case Step::prepend:
        if (!text.empty()) text.insert(0, s.a);
        break;
      case Step::replace:
        replace_all(text, s.a, s.b);
        break;
      case Step::nfc:
        for (size_t i = 0, n = 0; i < text.size(); i += n) {
          const char32_t c = utf8_decode_at(text, i, &n);
          ST_CHECK(nfc_stable(c), ValueError,
                   "tokenizer: the NFC normalizer is supported only for text already in NFC by its ranges (below U+0300, "
                   "CJK, kana, Hangul syllables, fullwidth forms, emoji); U+"
                       << std::hex << std::uppercase << static_cast<uint32_t>(c) << " is outside them");
        }
        break;
    }
  }
}

// ---- pre-tokenizer ------------------------------------------------------------------------------

HfPreTokenizer::HfPreTokenizer(const nlohmann::json& json, const std::string& file) {
  if (!json.is_null()) add(json, file);
}
HfPreTokenizer::~HfPreTokenizer() = default;

void HfPreTokenizer::add(const nlohmann::json& j, const std::string& file) {
  const std::string type = type_of(j, file, "pre_tokenizer");
  Step s{};
  if (type == "Sequence") {
    for (const auto& p : j.at("pretokenizers")) add(p, file);
    return;
  } else if (type == "ByteLevel") {
    s.kind = Step::byte_level;
    s.add_prefix_space = j.value("add_prefix_space", true);
    if (j.value("use_regex", true)) {
      static const auto gpt2 = std::make_shared<UnicodeRegex>(kGpt2Pattern, false, "ByteLevel");
      s.regex = gpt2;
    }
  } else if (type == "Split") {
    s.kind = Step::split;
    bool literal = false;
    const std::string p = pattern_of(j, file, "pre_tokenizer Split", &literal);
    s.regex = std::make_shared<UnicodeRegex>(p, literal, file + ": pre_tokenizer Split");
    const std::string b = j.at("behavior").get<std::string>();
    if (b == "Removed") s.behavior = SplitBehavior::removed;
    else if (b == "Isolated") s.behavior = SplitBehavior::isolated;
    else if (b == "MergedWithPrevious") s.behavior = SplitBehavior::merged_with_previous;
    else if (b == "MergedWithNext") s.behavior = SplitBehavior::merged_with_next;
    else if (b == "Contiguous") s.behavior = SplitBehavior::contiguous;
    else ST_THROW(ValueError, file << ": pre_tokenizer Split: unknown behavior " << b);
    s.invert = j.value("invert", false);
  } else if (type == "Metaspace") {
    s.kind = Step::metaspace;
    s.replacement = j.value("replacement", std::string("\xE2\x96\x81"));
    size_t n = 0;
    ST_CHECK(!s.replacement.empty() && utf8_valid(s.replacement) && (utf8_decode_at(s.replacement, 0, &n), n) == s.replacement.size(),
             ValueError, file << ": pre_tokenizer Metaspace: replacement must be one character");
    const std::string scheme = j.contains("prepend_scheme") ? j["prepend_scheme"].get<std::string>()
                                                            : (j.value("add_prefix_space", true) ? "always" : "never");
    if (scheme == "always") s.prepend = Step::always;
    else if (scheme == "first") s.prepend = Step::first;
    else if (scheme == "never") s.prepend = Step::never;
    else ST_THROW(ValueError, file << ": pre_tokenizer Metaspace: unknown prepend_scheme " << scheme);
    s.split_words = j.value("split", true);
  } else {
    ST_THROW(ValueError, file << ": pre_tokenizer " << type << " is not supported (supported: Sequence, ByteLevel, Split, Metaspace)");
  }
  steps_.push_back(std::move(s));
}

void HfPreTokenizer::run(const Step& s, const Piece& in, std::vector<Piece>& out) const {
  thread_local std::vector<std::pair<std::pair<size_t, size_t>, bool>> spans;
  switch (s.kind) {
    case Step::split:
      spans_of(*s.regex, in.text, s.invert, spans);
      split_by(in, spans, s.behavior, out);
      return;
    case Step::byte_level: {
      const size_t first = out.size();
      Piece p{in.text, -1, in.at_start};
      if (p.text.empty()) return;
      if (s.add_prefix_space && p.text[0] != ' ') p.text.insert(p.text.begin(), ' ');
      if (s.regex) {
        spans_of(*s.regex, p.text, false, spans);
        split_by(p, spans, SplitBehavior::isolated, out);
      } else {
        out.push_back(std::move(p));
      }
      for (size_t k = first; k < out.size(); ++k) {  // bytes → their printable stand-ins
        std::string mapped;
        mapped.reserve(out[k].text.size() * 2);
        for (unsigned char c : out[k].text) mapped += byte_map().to_char[c];
        out[k].text.swap(mapped);
      }
      return;
    }
    case Step::metaspace: {
      Piece p{in.text, -1, in.at_start};
      if (p.text.empty()) return;
      replace_all(p.text, " ", s.replacement);
      const bool starts = p.text.compare(0, s.replacement.size(), s.replacement) == 0;
      if (!starts && (s.prepend == Step::always || (s.prepend == Step::first && p.at_start))) p.text.insert(0, s.replacement);
      if (!s.split_words) {
        out.push_back(std::move(p));
        return;
      }
      spans.clear();  // each replacement character begins a piece (MergedWithNext)
      size_t prev = 0;
      for (size_t k = 0; (k = p.text.find(s.replacement, k)) != std::string::npos; k += s.replacement.size()) {
        if (k > prev) spans.push_back({{prev, k}, false});
        spans.push_back({{k, k + s.replacement.size()}, true});
        prev = k + s.replacement.size();
      }
      if (prev < p.text.size()) spans.push_back({{prev, p.text.size()}, false});
      split_by(p, spans, SplitBehavior::merged_with_next, out);
      return;
    }
  }
}

void HfPreTokenizer::apply(std::vector<Piece>& pieces) const {
  thread_local std::vector<Piece> next;
  for (const Step& s : steps_) {
    next.clear();
    for (Piece& p : pieces) {
      if (p.added >= 0) next.push_back(std::move(p));
      else run(s, p, next);
    }
    pieces.swap(next);
  }
}

}  // namespace st::runtime
