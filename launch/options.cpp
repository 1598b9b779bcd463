// The option engine: strict value parsing, YAML file then flags, generated --help.
#include "launch/options.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

namespace st::launch {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

template <class T>
T parse_integer(const std::string& text, const char* what) {
  T v{};
  const char* b = text.data();
  const char* e = b + text.size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (text.empty() || ec != std::errc() || p != e)
    ST_THROW(ValueError, "expected " << what << ", got '" << text << "'");
  return v;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

void OptionTable::add(OptionSpec spec) {
  if (find(spec.name)) ST_THROW(ValueError, "option --" << spec.name << " defined twice");
  specs_.push_back(std::move(spec));
}

const OptionSpec* OptionTable::find(const std::string& name) const {
  for (const auto& s : specs_)
    if (s.name == name) return &s;
  return nullptr;
}

std::function<void(const std::string&)> OptionTable::bind(int64_t& v) {
  return [&v](const std::string& t) { v = parse_integer<int64_t>(t, "an integer"); };
}
std::function<void(const std::string&)> OptionTable::bind(uint64_t& v) {
  return [&v](const std::string& t) { v = parse_integer<uint64_t>(t, "a non-negative integer"); };
}
std::function<void(const std::string&)> OptionTable::bind(double& v) {
  return [&v](const std::string& t) {
    size_t pos = 0;
    double d = 0;
    try {
      d = std::stod(t, &pos);
    } catch (const std::exception&) {
      pos = std::string::npos;
    }
    if (t.empty() || pos != t.size() || !std::isfinite(d)) ST_THROW(ValueError, "expected a finite number, got '" << t << "'");
    v = d;
  };
}
std::function<void(const std::string&)> OptionTable::bind(bool& v) {
  return [&v](const std::string& t) {
    const std::string l = lower(t);
    if (l == "1" || l == "true" || l == "yes" || l == "on")
      v = true;
    else if (l == "0" || l == "false" || l == "no" || l == "off")
      v = false;
    else
      ST_THROW(ValueError, "expected 0|1 (or true|false), got '" << t << "'");
  };
}
std::function<void(const std::string&)> OptionTable::bind(std::string& v) {
  return [&v](const std::string& t) { v = t; };
}
std::function<void(const std::string&)> OptionTable::bind_choice(std::string& v, std::vector<std::string> choices) {
  return [&v, choices](const std::string& t) {
    if (std::find(choices.begin(), choices.end(), t) == choices.end()) {
      std::ostringstream o;
      for (size_t i = 0; i < choices.size(); ++i) o << (i ? "|" : "") << choices[i];
      ST_THROW(ValueError, "expected one of " << o.str() << ", got '" << t << "'");
    }
    v = t;
  };
}

std::string OptionTable::suggest(const std::string& name) const {
  std::string best;
  size_t best_d = 3;  // suggest only close names
  std::string alt = name;
  std::replace(alt.begin(), alt.end(), '_', '-');
  for (const auto& s : specs_) {
    size_t d = std::min(edit_distance(name, s.name), edit_distance(alt, s.name));
    if (d < best_d) best_d = d, best = s.name;
  }
  return best;
}

void OptionTable::apply(const std::string& name, const std::string& value, const std::string& where, bool from_file) {
  const std::string what = from_file ? "key '" + name + "'" : "flag --" + name;
  const OptionSpec* s = find(name);
  if (!s) {
    std::string hint = suggest(name);
    ST_THROW(UsageError, where << ": unknown " << what << " for shardtrain " << command_
                               << (hint.empty() ? "" : " (did you mean " + std::string(from_file ? "'" : "--") + hint +
                                                           (from_file ? "'" : "") + "?)"));
  }
  try {
    s->set(value);
  } catch (const ValueError& e) {
    ST_THROW(UsageError, where << ": " << what << ": " << e.what());
  }
  origin_[name] = where;
}

std::string OptionTable::origin_of(const std::string& name) const {
  auto it = origin_.find(name);
  return it == origin_.end() ? std::string() : " (from " + it->second + ")";
}

void OptionTable::load_yaml(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    ST_THROW(UsageError, "config " << path << ": cannot open");
  } catch (const YAML::Exception& e) {
    ST_THROW(UsageError, "config " << path << ": YAML error at line " << e.mark.line + 1 << ": " << e.msg);
  }
  if (root.IsNull()) return;  // an empty file sets nothing
  if (!root.IsMap()) ST_THROW(UsageError, "config " << path << ": expected a mapping of option: value");
  const std::string where = "config " + path;
  std::vector<std::string> seen;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) ST_THROW(UsageError, where << ": line " << kv.first.Mark().line + 1 << ": a key must be a plain name");
    const std::string key = kv.first.Scalar();
    if (std::find(seen.begin(), seen.end(), key) != seen.end())
      ST_THROW(UsageError, where << ": key '" << key << "' appears twice (line " << kv.first.Mark().line + 1 << ")");
    seen.push_back(key);
    const YAML::Node& v = kv.second;
    if (v.IsNull()) {
      if (find(key)) {  // an empty value keeps the default (e.g. "init-from:")
        origin_.erase(key);
        continue;
      }
    } else if (!v.IsScalar()) {
      if (find(key)) ST_THROW(UsageError, where << ": key '" << key << "' (line " << v.Mark().line + 1 << "): expected a single value");
    }
    apply(key, v.IsScalar() ? v.Scalar() : std::string(), where, true);
  }
}

std::string OptionTable::config_path(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config") {
      if (i + 1 >= args.size()) ST_THROW(UsageError, "command line: flag --config needs a value");
      return args[i + 1];
    }
    if (args[i].rfind("--config=", 0) == 0) return args[i].substr(9);
  }
  return "";
}

bool OptionTable::wants_help(const std::vector<std::string>& args) {
  return std::any_of(args.begin(), args.end(), [](const std::string& a) { return a == "--help" || a == "-h"; });
}

void OptionTable::parse_flags(const std::vector<std::string>& args) {
  const std::string where = "command line";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() < 3 || a.compare(0, 2, "--") != 0)
      ST_THROW(UsageError, where << ": unexpected argument '" << a << "' for shardtrain " << command_ << " (flags are --name value)");
    std::string name = a.substr(2), value;
    bool have_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      have_value = true;
    }
    if (name == "config" && accepts_config_) {
      if (!have_value) ++i;
      continue;
    }
    const OptionSpec* s = find(name);
    if (!have_value) {
      const bool next_is_value = i + 1 < args.size() && !(args[i + 1].size() > 2 && args[i + 1].compare(0, 2, "--") == 0);
      if (s && s->is_switch) {
        // a switch takes the word after it whatever it is (not another flag): a value it does not
        // accept ("--async-checkpoint 2") is then an error naming the flag and its values, not
        // an unexpected argument naming none (no command takes a bare argument)
        value = next_is_value ? args[++i] : "1";
      } else if (s) {
        if (i + 1 >= args.size()) ST_THROW(UsageError, where << ": flag --" << name << " needs a value (" << s->metavar << ")");
        value = args[++i];
      }
    }
    apply(name, value, where, false);
  }
}

namespace {

constexpr size_t kHelpIndent = 38;  // where an entry's text starts
constexpr size_t kHelpWidth = 100;  // the columns an entry's lines stay within (a longer word overflows)

// `text` broken at spaces into lines of at most `width` columns, the first starting at column
// `first`, the others indented by `indent` spaces.
std::string wrap_words(const std::string& text, size_t indent, size_t width, size_t first) {
  std::string out;
  size_t col = first, i = 0;
  bool line_start = true;
  while (i < text.size()) {
    const size_t end = std::min(text.find(' ', i), text.size());
    const std::string word = text.substr(i, end - i);
    i = end + 1;
    if (word.empty()) continue;
    if (!line_start && col + 1 + word.size() > width) {
      out += "\n" + std::string(indent, ' ');
      col = indent;
      line_start = true;
    }
    if (!line_start) {
      out += ' ';
      ++col;
    }
    out += word;
    col += word.size();
    line_start = false;
  }
  return out;
}

}  // namespace

std::string OptionTable::help(const std::string& usage, const std::string& epilog) const {
  std::ostringstream o;
  o << "usage: " << usage << "\n";
  std::vector<std::string> groups;
  for (const auto& s : specs_)
    if (std::find(groups.begin(), groups.end(), s.group) == groups.end()) groups.push_back(s.group);
  for (const auto& g : groups) {
    o << "\n" << g << ":\n";
    for (const auto& s : specs_) {
      if (s.group != g) continue;
      std::string left = "  --" + s.name + (s.metavar.empty() ? "" : " " + s.metavar);
      std::string text = s.help;
      if (s.get) {
        std::string d = s.get();
        text += " [default: " + (d.empty() ? std::string("none") : d) + "]";
      }
      o << left << std::string(left.size() < kHelpIndent ? kHelpIndent - left.size() : 1, ' ')
        << wrap_words(text, kHelpIndent, kHelpWidth, std::max(left.size() + 1, kHelpIndent)) << "\n";
    }
  }
  if (!epilog.empty()) o << "\n" << epilog << "\n";
  return o.str();
}

}  // namespace st::launch
