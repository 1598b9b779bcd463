// GPT-2 byte-level BPE: pre-tokeniser over code points, bytes_to_unicode, rank-ordered merges.
#include "launch/bpe_tokenizer.h"

#include <array>
#include <climits>
#include <fstream>
#include <nlohmann/json.hpp>

#include "launch/byte_tokenizer.h"
#include "tensor/error.h"

namespace st::launch {
namespace {

struct CodePoint {
  uint32_t cp;     // 0xFFFFFFFF for an invalid byte
  size_t begin, end;  // byte range in the text
};

std::vector<CodePoint> utf8_decode(const std::string& s) {
  std::vector<CodePoint> out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; ok && k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      ok = (c >> 6) == 2;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (!ok) { out.push_back({0xFFFFFFFFu, i, i + 1}); ++i; continue; }
    out.push_back({cp, i, i + len});
    i += len;
  }
  return out;
}

void utf8_append(std::string& s, uint32_t cp) {
  if (cp < 0x80) { s += static_cast<char>(cp); return; }
  if (cp < 0x800) { s += static_cast<char>(0xC0 | (cp >> 6)); }
  else { s += static_cast<char>(0xE0 | (cp >> 12)); s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)); }
  s += static_cast<char>(0x80 | (cp & 0x3F));  // code points here are < 0x10000
}

bool in(uint32_t c, uint32_t lo, uint32_t hi) { return c >= lo && c <= hi; }

bool is_space(uint32_t c) {  // Unicode White_Space
  return in(c, 9, 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 || in(c, 0x2000, 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
bool is_letter(uint32_t c) {  // \p{L}, approximated beyond ASCII (see header)
  if (c < 0x80) return in(c, 'a', 'z') || in(c, 'A', 'Z');
  if (c == 0xAA || c == 0xB5 || c == 0xBA) return true;
  if (in(c, 0xC0, 0x2AF)) return c != 0xD7 && c != 0xF7;
  if (in(c, 0x370, 0x3FF)) return c != 0x375 && c != 0x37E && c != 0x384 && c != 0x385 && c != 0x387;
  if (in(c, 0x400, 0x52F)) return !in(c, 0x482, 0x489);
  return in(c, 0x1E00, 0x1FFF) || in(c, 0x3041, 0x3096) || in(c, 0x30A1, 0x30FA) ||
         in(c, 0x4E00, 0x9FFF) || in(c, 0xAC00, 0xD7A3);
}
bool is_number(uint32_t c) {  // \p{N}, approximated beyond ASCII
  return in(c, '0', '9') || c == 0xB2 || c == 0xB3 || c == 0xB9 || in(c, 0xBC, 0xBE) || in(c, 0x660, 0x669) ||
         in(c, 0x6F0, 0x6F9) || in(c, 0x966, 0x96F) || c == 0x2070 || in(c, 0x2074, 0x2079) ||
         in(c, 0x2080, 0x2089) || in(c, 0x2150, 0x2189) || in(c, 0xFF10, 0xFF19);
}
bool is_other(uint32_t c) { return !is_space(c) && !is_letter(c) && !is_number(c); }

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to 256 + n in order.
const std::array<uint32_t, 256>& byte_to_cp() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b)
      t[b] = (in(b, '!', '~') || in(b, 0xA1, 0xAC) || in(b, 0xAE, 0xFF)) ? b : 256 + n++;
    return t;
  }();
  return table;
}

std::string read_file_named(const std::string& path) {
  std::ifstream probe(path, std::ios::binary);
  if (!probe) ST_THROW(IOError, path << ": cannot open (GPT-2 tokenizer file)");
  return read_text_file(path);
}

}  // namespace

std::vector<std::string> gpt2_pretokenize(const std::string& text) {
  const std::vector<CodePoint> cps = utf8_decode(text);
  const size_t n = cps.size();
  auto cp = [&](size_t i) { return i < n ? cps[i].cp : 0xFFFFFFFEu; };  // 0xFFFFFFFE: end
  auto run = [&](size_t j, bool (*cls)(uint32_t)) {
    while (j < n && cls(cps[j].cp)) ++j;
    return j;
  };
  std::vector<std::string> out;
  for (size_t i = 0; i < n;) {
    size_t end = i;
    if (cp(i) == '\'') {  // 's 't 're 've 'm 'll 'd
      const uint32_t a = cp(i + 1), b = cp(i + 2);
      if (a == 's' || a == 't' || a == 'm' || a == 'd') end = i + 2;
      else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) end = i + 3;
    }
    const size_t j = cp(i) == ' ' ? i + 1 : i;  // the optional leading space
    if (end == i && j < n) {
      bool (*cls)(uint32_t) = is_letter(cp(j)) ? is_letter : is_number(cp(j)) ? is_number
                              : is_other(cp(j)) ? is_other : nullptr;
      if (cls) end = run(j, cls);
    }
    if (end == i) {  // whitespace: \s+(?!\S) backs off one before a non-space, else \s+
      const size_t k = run(i, is_space);
      end = (k < n && k - i >= 2) ? k - 1 : k;
    }
    out.push_back(text.substr(cps[i].begin, cps[end - 1].end - cps[i].begin));
    i = end;
  }
  return out;
}

BpeTokenizer BpeTokenizer::load(const std::string& dir) {
  const std::string vpath = dir + "/vocab.json", mpath = dir + "/merges.txt";
  std::unordered_map<std::string, int64_t> vocab;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_file_named(vpath));
    if (!j.is_object()) ST_THROW(IOError, vpath << ": expected a JSON object token → id");
    for (const auto& [tok, id] : j.items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0)
        ST_THROW(IOError, vpath << ": token '" << tok << "' has no non-negative integer id");
      vocab[tok] = id.get<int64_t>();
    }
  } catch (const nlohmann::json::exception& e) {
    ST_THROW(IOError, vpath << ": bad JSON: " << e.what());
  }
  std::vector<std::pair<std::string, std::string>> merges;
  const std::string m = read_file_named(mpath);
  size_t line_no = 0;
  for (size_t pos = 0; pos < m.size();) {
    size_t nl = m.find('\n', pos);
    if (nl == std::string::npos) nl = m.size();
    std::string line = m.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() || line.find(' ', sp + 1) != std::string::npos)
      ST_THROW(IOError, mpath << ":" << line_no << ": expected 'first second', got '" << line << "'");
    merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  return BpeTokenizer(std::move(vocab), merges, vpath);
}

BpeTokenizer::BpeTokenizer(std::unordered_map<std::string, int64_t> vocab,
                           const std::vector<std::pair<std::string, std::string>>& merges, std::string vocab_name)
    : vocab_(std::move(vocab)), vocab_name_(std::move(vocab_name)) {
  for (const auto& [tok, id] : vocab_) inverse_[id] = tok;
  for (size_t r = 0; r < merges.size(); ++r)
    ranks_.emplace(merges[r].first + " " + merges[r].second, static_cast<int64_t>(r));  // first rank wins
}

std::vector<std::string> BpeTokenizer::bpe(const std::string& piece) const {
  std::vector<std::string> word;  // one symbol per byte, byte-mapped
  for (unsigned char b : piece) {
    word.emplace_back();
    utf8_append(word.back(), byte_to_cp()[b]);
  }
  while (word.size() > 1) {  // merge the lowest-ranked pair, every occurrence left to right
    int64_t best = INT64_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      auto it = ranks_.find(word[i] + " " + word[i + 1]);
      if (it != ranks_.end() && it->second < best) { best = it->second; at = i; }
    }
    if (best == INT64_MAX) break;
    const std::string first = word[at], second = word[at + 1];
    std::vector<std::string> next;
    for (size_t i = 0; i < word.size(); ++i) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        next.push_back(first + second);
        ++i;
      } else {
        next.push_back(word[i]);
      }
    }
    word = std::move(next);
  }
  return word;
}

std::vector<int64_t> BpeTokenizer::encode(const std::string& text) const {
  std::vector<int64_t> ids;
  std::unordered_map<std::string, std::vector<int64_t>> cache;  // pre-token → ids
  for (const std::string& piece : gpt2_pretokenize(text)) {
    auto [it, fresh] = cache.try_emplace(piece);
    if (fresh) {
      for (const std::string& sym : bpe(piece)) {
        auto v = vocab_.find(sym);
        if (v == vocab_.end()) ST_THROW(ValueError, vocab_name_ << ": token '" << sym << "' is not in the vocabulary");
        it->second.push_back(v->second);
      }
    }
    ids.insert(ids.end(), it->second.begin(), it->second.end());
  }
  return ids;
}

std::vector<uint16_t> BpeTokenizer::encode_u16(const std::string& text) const {
  std::vector<int64_t> ids = encode(text);
  std::vector<uint16_t> out(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= 65536)
      ST_THROW(ValueError, vocab_name_ << ": id " << ids[i] << " does not fit the uint16 .bin format (≥ 65536)");
    out[i] = static_cast<uint16_t>(ids[i]);
  }
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::array<int, 0x200> cp_to_byte;  // every mapped code point is < 0x144
  cp_to_byte.fill(-1);
  for (int b = 0; b < 256; ++b) cp_to_byte[byte_to_cp()[b]] = b;
  std::string out;
  for (int64_t id : ids) {
    auto it = inverse_.find(id);
    if (it == inverse_.end()) ST_THROW(ValueError, vocab_name_ << ": id " << id << " is not in the vocabulary");
    for (const CodePoint& c : utf8_decode(it->second)) {
      if (c.cp >= cp_to_byte.size() || cp_to_byte[c.cp] < 0)
        ST_THROW(ValueError, vocab_name_ << ": token '" << it->second << "' (id " << id << ") is not byte-mapped");
      out += static_cast<char>(cp_to_byte[c.cp]);
    }
  }
  return out;
}

}  // namespace st::launch
