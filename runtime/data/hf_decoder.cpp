// HfDecoder (runtime/data/hf_decoder.h).
#include "runtime/data/hf_decoder.h"

#include <nlohmann/json.hpp>

#include "runtime/data/hf_pretokenizer.h"
#include "runtime/data/utf8.h"
#include "tensor/error.h"

namespace st::runtime {
namespace {

std::vector<char32_t> code_points(const std::string& s) {
  std::vector<char32_t> cps;
  for (size_t i = 0, n = 0; i < s.size(); i += n) cps.push_back(utf8_decode_at(s, i, &n));
  return cps;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

HfDecoder::HfDecoder(const nlohmann::json& json, const std::string& file) {
  if (json.is_null()) return;
  none_ = false;
  add(json, file);
}

void HfDecoder::add(const nlohmann::json& j, const std::string& file) {
  ST_CHECK(j.is_object() && j.contains("type"), ValueError, file << ": a decoder without a \"type\"");
  const std::string type = j["type"].get<std::string>();
  Step s{};
  if (type == "Sequence") {
    for (const auto& d : j.at("decoders")) add(d, file);
    return;
  } else if (type == "ByteLevel") {
    s.kind = Step::byte_level;
  } else if (type == "Metaspace") {
    s.kind = Step::metaspace;
    s.a = j.value("replacement", std::string("\xE2\x96\x81"));
    const std::string scheme = j.contains("prepend_scheme") ? j["prepend_scheme"].get<std::string>()
                                                            : (j.value("add_prefix_space", true) ? "always" : "never");
    s.prepend = scheme != "never";
  } else if (type == "Replace") {
    s.kind = Step::replace;
    ST_CHECK(j.contains("pattern") && j["pattern"].contains("String"), ValueError,
             file << ": decoder Replace with a Regex pattern is not supported (String patterns are)");
    s.a = j["pattern"]["String"].get<std::string>();
    s.b = j.at("content").get<std::string>();
  } else if (type == "ByteFallback") {
    s.kind = Step::byte_fallback;
  } else if (type == "Fuse") {
    s.kind = Step::fuse;
  } else if (type == "Strip") {
    s.kind = Step::strip;
    s.a = j.at("content").get<std::string>();
    s.start = j.value("start", 0);
    s.stop = j.value("stop", 0);
  } else {
    ST_THROW(ValueError, file << ": decoder " << type
                              << " is not supported (supported: Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip)");
  }
  steps_.push_back(std::move(s));
}

std::string HfDecoder::decode(std::vector<std::string> tokens) const {
  if (none_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  for (const Step& s : steps_) {
    std::vector<std::string> next;
    switch (s.kind) {
      case Step::byte_level: {  // all tokens into one string
        std::string bytes;
        for (const std::string& t : tokens) {
          std::string mine;
          bool all = true;
          for (size_t i = 0, n = 0; i < t.size() && all; i += n) {
            const int b = byte_level_byte(utf8_decode_at(t, i, &n));
            if (b < 0) all = false;
            else mine.push_back(static_cast<char>(b));
          }
          bytes += all ? mine : t;  // a token with a character outside the map: its own bytes
        }
        next.push_back(utf8_replace_invalid(bytes));
        break;
      }
      case Step::metaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          std::string out;
          const std::string& t = tokens[i];
          for (size_t k = 0; k < t.size();) {
            if (t.compare(k, s.a.size(), s.a) == 0) {
              if (!(i == 0 && s.prepend)) out.push_back(' ');
              k += s.a.size();
            } else {
              out.push_back(t[k++]);
            }
          }
          next.push_back(std::move(out));
        }
        break;
      case Step::replace:
        for (std::string t : tokens) {
          std::string out;
          size_t i = 0;
          for (size_t k; !s.a.empty() && (k = t.find(s.a, i)) != std::string::npos; i = k + s.a.size())
            out.append(t, i, k - i).append(s.b);
          out.append(t, i, std::string::npos);
          next.push_back(std::move(out));
        }
        break;
      case Step::byte_fallback: {
        std::string run;  // consecutive <0xXX> bytes
        const auto flush = [&] {
          if (run.empty()) return;
          if (utf8_valid(run)) next.push_back(run);
          else for (size_t k = 0; k < run.size(); ++k) next.emplace_back(kReplacementChar);
          run.clear();
        };
        for (std::string& t : tokens) {
          const bool is_byte = t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex_digit(t[3]) >= 0 &&
                               hex_digit(t[4]) >= 0;
          if (is_byte) {
            run.push_back(static_cast<char>(hex_digit(t[3]) * 16 + hex_digit(t[4])));
          } else {
            flush();
            next.push_back(std::move(t));
          }
        }
        flush();
        break;
      }
      case Step::fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        next.push_back(std::move(all));
        break;
      }
      case Step::strip: {
        const std::vector<char32_t> c = code_points(s.a);
        const char32_t content = c.empty() ? 0 : c[0];
        for (const std::string& t : tokens) {
          const std::vector<char32_t> cps = code_points(t);
          size_t begin = 0, end = cps.size();
          for (int k = 0; k < s.start && begin < cps.size() && cps[begin] == content; ++k) ++begin;
          for (int k = 0; k < s.stop && end > begin && cps[end - 1] == content; ++k) --end;
          std::string out;
          for (size_t k = begin; k < end; ++k) utf8_append(out, cps[k]);
          next.push_back(std::move(out));
        }
        break;
      }
    }
    tokens.swap(next);
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace st::runtime
