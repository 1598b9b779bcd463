// HfBpe (runtime/data/hf_bpe.h).
#include "runtime/data/hf_bpe.h"

#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <algorithm>
#include <functional>

#include "runtime/data/utf8.h"
#include "tensor/error.h"

namespace st::runtime {
namespace {

std::atomic<uint64_t> next_serial{1};

// The per-thread cache of one model: pre-token → ids. Bounded like the library's (it stops
// adding at its capacity): a corpus's long tail of rare words does not grow it without end.
constexpr size_t kCacheCapacity = 1 << 18;
struct WordCache {
  uint64_t serial = 0;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
};

}  // namespace

HfBpe::HfBpe(const nlohmann::json& model, const std::string& file) : serial_(next_serial++) {
  const auto str = [&](const char* key) -> std::string {
    if (!model.contains(key) || model[key].is_null()) return "";
    ST_CHECK(model[key].is_string(), ValueError, file << ": model." << key << " is not a string");
    return model[key].get<std::string>();
  };
  ST_CHECK(model.contains("vocab") && model["vocab"].is_object(), ValueError, file << ": model.vocab is not an object");
  for (const auto& [tok, id] : model["vocab"].items()) {
    ST_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (int64_t{1} << 31), ValueError,
             file << ": model.vocab[" << tok << "] is not an id");
    vocab_.emplace(tok, id.get<int32_t>());
  }
  if (model.contains("dropout") && !model["dropout"].is_null())
    ST_CHECK(model["dropout"].get<double>() == 0.0, ValueError, file << ": BPE dropout is not supported (encoding would be random)");
  ST_CHECK(str("continuing_subword_prefix").empty(), ValueError, file << ": BPE continuing_subword_prefix is not supported");
  ST_CHECK(str("end_of_word_suffix").empty(), ValueError, file << ": BPE end_of_word_suffix is not supported");
  fuse_unk_ = model.value("fuse_unk", false);
  byte_fallback_ = model.value("byte_fallback", false);
  ignore_merges_ = model.value("ignore_merges", false);
  if (const std::string unk = str("unk_token"); !unk.empty()) {
    auto it = vocab_.find(unk);
    ST_CHECK(it != vocab_.end(), ValueError, file << ": model.unk_token " << unk << " is not in the vocabulary");
    unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = vocab_.find(std::string_view(name));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
  // cut_at_metaspace_: ▁ is a token and no token holds ▁ after another character
  const std::string_view meta = "\xE2\x96\x81";
  cut_at_metaspace_ = vocab_.count(meta) > 0;
  for (const auto& [tok, id] : vocab_) {
    if (!cut_at_metaspace_) break;
    size_t lead = 0;
    while (tok.compare(lead, meta.size(), meta) == 0) lead += meta.size();
    if (tok.find(meta, lead) != std::string::npos) cut_at_metaspace_ = false;
  }
  const auto& merges = model.contains("merges") ? model["merges"] : nlohmann::json::array();
  ST_CHECK(merges.is_array(), ValueError, file << ": model.merges is not a list");
  uint64_t rank = 0;
  for (const auto& m : merges) {
    std::string a, b;
    if (m.is_string()) {  // "a b" (tokenizers < 0.20 and many files in use)
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      ST_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, ValueError,
               file << ": merge #" << rank << " '" << s << "' is not two tokens separated by one space");
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else {
      ST_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), ValueError,
               file << ": merge #" << rank << " is neither \"a b\" nor [\"a\", \"b\"]");
      a = m[0].get<std::string>(), b = m[1].get<std::string>();
    }
    const auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(a + b);
    ST_CHECK(ia != vocab_.end() && ib != vocab_.end(), ValueError,
             file << ": merge #" << rank << " (" << a << ", " << b << ") names a token not in the vocabulary");
    ST_CHECK(iab != vocab_.end(), ValueError, file << ": merge #" << rank << " makes " << a << b << ", not in the vocabulary");
    const uint64_t key = (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
    merges_.emplace(key, (rank << 32) | static_cast<uint32_t>(iab->second));  // the first of a repeated pair wins
    ++rank;
  }
}

void HfBpe::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (!cut_at_metaspace_) {
    encode_part(word, out);
    return;
  }
  const std::string_view meta = "\xE2\x96\x81";
  size_t begin = 0;
  for (size_t k = word.find(meta, 1); k != std::string_view::npos; k = word.find(meta, k + 1)) {
    if (k >= 3 && word.compare(k - 3, 3, meta) == 0) continue;  // ▁ after ▁: a run stays whole
    encode_part(word.substr(begin, k - begin), out);
    begin = k;
  }
  encode_part(word.substr(begin), out);
}

void HfBpe::encode_part(std::string_view word, std::vector<int32_t>& out) const {
  thread_local WordCache cache;
  if (cache.serial != serial_) {  // another model ran on this thread since: start over
    cache.map.clear();
    cache.serial = serial_;
  }
  if (auto it = cache.map.find(word); it != cache.map.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t first = out.size();
  merge_word(word, out);
  if (cache.map.size() < kCacheCapacity) cache.map.emplace(std::string(word), std::vector<int32_t>(out.begin() + first, out.end()));
}

void HfBpe::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  // symbols: a doubly linked list over the word's initial tokens
  struct Symbol {
    int32_t id, prev, next;
    bool gone;
  };
  thread_local std::vector<Symbol> sym;
  sym.clear();
  const auto add = [&](int32_t id) {
    const int32_t n = static_cast<int32_t>(sym.size());
    sym.push_back({id, n - 1, n + 1, false});
  };
  int32_t unk_pending = -1;  // as the library: an unknown waits, fused with the next under fuse_unk
  for (size_t i = 0; i < word.size();) {
    const size_t len = utf8_char_len(static_cast<unsigned char>(word[i]));
    const std::string_view ch = word.substr(i, len);
    i += len;
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      if (unk_pending >= 0) add(unk_pending), unk_pending = -1;
      add(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char c : ch) all = all && byte_ids_[c] >= 0;
      if (all) {  // (a pending unknown is not flushed first: the library's order)
        for (unsigned char c : ch) add(byte_ids_[c]);
        continue;
      }
    }
    if (unk_id_ < 0) continue;  // no unk_token: the character is dropped
    if (unk_pending >= 0 && !fuse_unk_) add(unk_pending);
    unk_pending = unk_id_;
  }
  if (unk_pending >= 0) add(unk_pending);
  if (sym.empty()) return;
  sym.back().next = -1;
  // (rank, position, merged id): the smallest rank first, then the leftmost
  struct Merge {
    uint32_t rank;
    int32_t pos, id;
    bool operator>(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Merge> heap;  // a min-heap by std::greater, reused across words
  heap.clear();
  const std::greater<Merge> later;
  const auto lookup = [&](int32_t a, int32_t b, uint64_t* v) {
    auto it = merges_.find((static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b));
    if (it == merges_.end()) return false;
    *v = it->second;
    return true;
  };
  const auto push = [&](int32_t pos) {
    const int32_t nx = sym[pos].next;
    uint64_t v = 0;
    if (nx >= 0 && lookup(sym[pos].id, sym[nx].id, &v))
    {
      heap.push_back({static_cast<uint32_t>(v >> 32), pos, static_cast<int32_t>(v & 0xFFFFFFFFu)});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (int32_t p = 0; p + 1 < static_cast<int32_t>(sym.size()); ++p) push(p);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Merge top = heap.back();
    heap.pop_back();
    Symbol& s = sym[top.pos];
    if (s.gone || s.next < 0) continue;
    uint64_t v = 0;  // the pair at this position may have changed since it was queued
    if (!lookup(s.id, sym[s.next].id, &v) || static_cast<int32_t>(v & 0xFFFFFFFFu) != top.id) continue;
    Symbol& right = sym[s.next];
    right.gone = true;
    s.id = top.id;
    s.next = right.next;
    if (s.next >= 0) sym[s.next].prev = top.pos;
    if (s.prev >= 0) push(s.prev);
    push(top.pos);
  }
  for (int32_t p = 0; p >= 0; p = sym[p].next) out.push_back(sym[p].id);
}

}  // namespace st::runtime
