// One option engine for every subcommand: a table of named options, each bound to a field,
// filled from a YAML file (flat mapping, keys = flag names without "--") and then from
// `--name value` / `--name=value` flags, so flags override the file whatever their position.
// The same table prints --help. Errors are UsageError naming the key or flag and the file
// (launch/main.cpp turns a UsageError into exit code 2).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/common/enum_names.h"
#include "tensor/error.h"

namespace st::launch {

class UsageError : public st::ValueError {
 public:
  using st::ValueError::ValueError;
};

struct OptionSpec {
  std::string name;     // "d-model" (the flag is --d-model, the YAML key d-model)
  std::string group;    // heading in --help: "model", "layout", ...
  std::string metavar;  // "N", "F", "FILE", "gpt|simple-transformer|mlp"
  std::string help;
  bool is_switch = false;  // may be given without a value (--resume means --resume 1)
  std::function<void(const std::string&)> set;  // throws ValueError("expected ...") on a bad value
  std::function<std::string()> get;             // current value (the default, in --help)
};

class OptionTable {
 public:
  // `accepts_config`: whether --config FILE.yaml is allowed (train only).
  explicit OptionTable(std::string command, bool accepts_config = true)
      : command_(std::move(command)), accepts_config_(accepts_config) {}
  void add(OptionSpec spec);
  const OptionSpec* find(const std::string& name) const;
  const std::vector<OptionSpec>& specs() const { return specs_; }

  // Binders: a setter that parses the text into the field (strictly: the whole text).
  static std::function<void(const std::string&)> bind(int64_t& v);
  static std::function<void(const std::string&)> bind(uint64_t& v);
  static std::function<void(const std::string&)> bind(double& v);
  static std::function<void(const std::string&)> bind(bool& v);
  static std::function<void(const std::string&)> bind(std::string& v);
  static std::function<void(const std::string&)> bind_choice(std::string& v, std::vector<std::string> choices);
  // An option enum, by the names of its EnumNames table (runtime/common/enum_names.h).
  template <runtime::NamedEnum E>
  static std::function<void(const std::string&)> bind_enum(E& v) {
    return [&v](const std::string& t) {
      const auto e = runtime::from_name<E>(t);
      if (!e) ST_THROW(ValueError, "expected one of " << runtime::choices_of<E>() << ", got '" << t << "'");
      v = *e;
    };
  }

  // Applies the YAML file's keys. Throws UsageError naming the file (and key, line).
  void load_yaml(const std::string& path);
  // Applies flags. `--config FILE` is skipped here (the caller loads it first, see config_path).
  void parse_flags(const std::vector<std::string>& args);
  // The value of --config in args, "" when absent.
  static std::string config_path(const std::vector<std::string>& args);
  static bool wants_help(const std::vector<std::string>& args);

  // Where each option that was set came from: "file X" or "command line".
  const std::map<std::string, std::string>& origin() const { return origin_; }
  bool was_set(const std::string& name) const { return origin_.count(name) > 0; }
  std::string origin_of(const std::string& name) const;  // " (from ...)" or ""

  std::string help(const std::string& usage, const std::string& epilog = "") const;

 private:
  void apply(const std::string& name, const std::string& value, const std::string& where, bool from_file);
  std::string suggest(const std::string& name) const;
  std::string command_;
  bool accepts_config_;
  std::vector<OptionSpec> specs_;
  std::map<std::string, std::string> origin_;
};

}  // namespace st::launch
