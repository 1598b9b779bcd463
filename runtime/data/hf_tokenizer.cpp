// HfTokenizer (runtime/data/hf_tokenizer.h).
#include "runtime/data/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/data/utf8.h"
#include "tensor/error.h"

namespace st::runtime {
namespace {

namespace fs = std::filesystem;

// single_word's word characters: ASCII letters, digits and '_', and any other non-ASCII
// character that is not white space (the library asks char::is_alphanumeric; the difference is
// non-ASCII punctuation next to a single_word token, which no tokenizer in use has).
bool word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return !unicode_white_space(c);
}

char32_t last_char(std::string_view s) {
  size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  size_t n = 0;
  return i > 0 ? utf8_decode_at(s, i - 1, &n) : 0;
}

nlohmann::json read_json(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  ST_CHECK(in.good(), IOError, "tokenizer: " << file << " cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    ST_THROW(IOError, "tokenizer: " << file << " is not JSON (" << e.what() << ")");
  }
}

}  // namespace

bool HfTokenizer::found_at(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return fs::is_regular_file(fs::path(path) / "tokenizer.json", ec);
  return fs::is_regular_file(path, ec) && fs::path(path).extension() == ".json";
}

HfTokenizer HfTokenizer::load(const std::string& path) {
  std::error_code ec;
  fs::path file = path;
  if (fs::is_directory(file, ec)) file /= "tokenizer.json";
  ST_CHECK(fs::is_regular_file(file, ec), IOError,
           "tokenizer: " << file.string() << " does not exist (--tokenizer takes a tokenizer.json or a directory holding one)");
  std::string eos_hint;  // tokenizer_config.json's eos_token, where one is beside it
  const fs::path config = file.parent_path() / "tokenizer_config.json";
  if (fs::is_regular_file(config, ec)) {
    const nlohmann::json c = read_json(config.string());
    if (c.contains("eos_token")) {
      const auto& e = c["eos_token"];
      if (e.is_string()) eos_hint = e.get<std::string>();
      else if (e.is_object() && e.contains("content") && e["content"].is_string()) eos_hint = e["content"].get<std::string>();
    }
  }
  return HfTokenizer(read_json(file.string()), file.string(), eos_hint);
}

HfTokenizer::HfTokenizer(const nlohmann::json& j, const std::string& file, const std::string& eos_hint) : file_(file) {
  try {
    ST_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), ValueError, file << ": no \"model\" object");
    const std::string type = j["model"].value("type", std::string("BPE"));
    ST_CHECK(type == "BPE", ValueError, file << ": model " << type << " is not supported (BPE models are)");
    ST_CHECK(!j.contains("truncation") || j["truncation"].is_null(), ValueError,
             file << ": truncation is set; it would cut the ids (remove it from the file)");
    model_ = std::make_shared<HfBpe>(j["model"], file);
    normalizer_ = std::make_shared<HfNormalizer>(j.value("normalizer", nlohmann::json()), file);
    pre_tokenizer_ = std::make_shared<HfPreTokenizer>(j.value("pre_tokenizer", nlohmann::json()), file);
    decoder_ = std::make_shared<HfDecoder>(j.value("decoder", nlohmann::json()), file);
    // ids → tokens: the model's vocabulary, then the added tokens (which win where both name an id)
    int32_t top = -1;
    for (const auto& [tok, id] : model_->vocab()) top = std::max(top, id);
    if (j.contains("added_tokens")) {
      for (const auto& a : j["added_tokens"]) {
        Added t{a.at("id").get<int32_t>(), a.at("content").get<std::string>(), a.value("special", false),
                a.value("lstrip", false), a.value("rstrip", false), a.value("single_word", false), a.value("normalized", false)};
        ST_CHECK(t.id >= 0 && !t.content.empty(), ValueError, file << ": added token " << a.dump() << " has no id or content");
        top = std::max(top, t.id);
        added_.push_back(std::move(t));
      }
    }
    id_to_token_.assign(static_cast<size_t>(top + 1), std::string());
    known_.assign(id_to_token_.size(), 0);
    special_.assign(id_to_token_.size(), 0);
    for (const auto& [tok, id] : model_->vocab()) id_to_token_[id] = tok, known_[id] = 1;
    raw_first_.assign(256, {});
    normalized_first_.assign(256, {});
    for (size_t k = 0; k < added_.size(); ++k) {
      const Added& a = added_[k];
      id_to_token_[a.id] = a.content, known_[a.id] = 1, special_[a.id] = a.special;
      (a.normalized ? normalized_first_ : raw_first_)[static_cast<unsigned char>(a.content[0])].push_back(static_cast<int>(k));
    }
    for (auto* set : {&raw_first_, &normalized_first_})
      for (auto& v : *set)
        std::stable_sort(v.begin(), v.end(), [&](int x, int y) { return added_[x].content.size() > added_[y].content.size(); });
    // the post-processor
    std::vector<nlohmann::json> procs;
    if (j.contains("post_processor") && !j["post_processor"].is_null()) procs.push_back(j["post_processor"]);
    for (size_t k = 0; k < procs.size(); ++k) {
      const nlohmann::json p = procs[k];
      const std::string pt = p.value("type", std::string());
      if (pt == "Sequence") {
        for (const auto& q : p.at("processors")) procs.push_back(q);
      } else if (pt == "TemplateProcessing") {
        bool seen = false;
        for (const auto& item : p.at("single")) {
          if (item.contains("Sequence")) {
            ST_CHECK(!seen, ValueError, file << ": TemplateProcessing's single template names a sequence twice");
            seen = true;
            continue;
          }
          const std::string name = item.at("SpecialToken").at("id").get<std::string>();
          ST_CHECK(p.at("special_tokens").contains(name), ValueError,
                   file << ": TemplateProcessing names " << name << ", not among its special_tokens");
          for (const auto& id : p["special_tokens"][name].at("ids")) (seen ? suffix_ : prefix_).push_back(id.get<int32_t>());
        }
      } else if (pt != "ByteLevel") {
        ST_THROW(ValueError, file << ": post_processor " << pt << " is not supported (TemplateProcessing, ByteLevel, Sequence are)");
      }
    }
  } catch (const nlohmann::json::exception& e) {
    ST_THROW(ValueError, file << ": not a tokenizer.json this reader knows (" << e.what() << ")");
  }
  if (prefix_.size() == 1) bos_ = prefix_[0];
  if (suffix_.size() == 1) eos_ = suffix_[0];
  if (eos_ < 0 && !eos_hint.empty()) eos_ = token_to_id(eos_hint);
  for (const char* name : {"</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>", "<|im_end|>"}) {
    if (eos_ >= 0) break;
    for (const Added& a : added_)
      if (a.special && a.content == name) eos_ = a.id;
  }
}

int32_t HfTokenizer::token_to_id(const std::string& token) const {
  for (const Added& a : added_)
    if (a.content == token) return a.id;
  auto it = model_->vocab().find(token);
  return it == model_->vocab().end() ? -1 : it->second;
}

void HfTokenizer::split_added(Piece&& in, const std::vector<std::vector<int>>& first, std::vector<Piece>& out) const {
  const std::string& s = in.text;
  size_t start = 0;  // the text not yet emitted begins here
  for (size_t i = 0; i < s.size();) {
    const auto& candidates = first[static_cast<unsigned char>(s[i])];
    int hit = -1;
    for (int k : candidates)  // longest first: leftmost-longest
      if (s.compare(i, added_[k].content.size(), added_[k].content) == 0) { hit = k; break; }
    if (hit < 0) {
      ++i;
      continue;
    }
    const Added& a = added_[hit];
    size_t b = i, e = i + a.content.size();
    i = e;
    if (a.single_word) {
      const bool left_ok = b == 0 || !word_char(last_char(std::string_view(s).substr(0, b)));
      size_t n = 0;
      const bool right_ok = e == s.size() || !word_char(utf8_decode_at(s, e, &n));
      if (!left_ok || !right_ok) continue;
    }
    if (a.lstrip) {  // the white space before it joins the token (not past the previous one)
      while (b > start) {
        size_t k = b - 1, n = 0;
        while (k > start && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        if (!unicode_white_space(utf8_decode_at(s, k, &n))) break;
        b = k;
      }
    }
    if (a.rstrip) {
      size_t n = 0;
      while (e < s.size() && unicode_white_space(utf8_decode_at(s, e, &n))) e += n;
      i = e;
    }
    if (b > start) out.push_back(Piece{s.substr(start, b - start), -1, in.at_start && start == 0});
    out.push_back(Piece{std::string(), a.id, false});
    start = e;
  }
  if (start == 0) {
    if (!s.empty()) out.push_back(std::move(in));
  } else if (start < s.size()) {
    out.push_back(Piece{s.substr(start), -1, false});
  }
}

void HfTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  thread_local std::vector<Piece> pieces, next;
  pieces.clear();
  next.clear();
  split_added(Piece{utf8_replace_invalid(text), -1, true}, raw_first_, pieces);
  if (!normalizer_->empty() || !added_.empty()) {
    for (Piece& p : pieces) {
      if (p.added >= 0) {
        next.push_back(std::move(p));
        continue;
      }
      normalizer_->apply(p.text);
      split_added(std::move(p), normalized_first_, next);
    }
    pieces.swap(next);
  }
  pre_tokenizer_->apply(pieces);
  for (const Piece& p : pieces) {
    if (p.added >= 0) out.push_back(p.added);
    else model_->encode_word(p.text, out);
  }
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  encode(text, ids);
  return ids;
}

std::vector<int32_t> HfTokenizer::encode_with_specials(std::string_view text) const {
  std::vector<int32_t> ids(prefix_);
  encode(text, ids);
  ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

std::string HfTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size() || !known_[id]) continue;  // the library passes over ids it lacks
    if (skip_special && special_[id]) continue;
    tokens.push_back(id_to_token_[id]);
  }
  return decoder_->decode(std::move(tokens));
}

}  // namespace st::runtime
