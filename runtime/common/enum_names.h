// The spelling of the runtime's option enums (precision, schedule, partition, optimizer, ...):
// one table per enum, written beside the enum as a specialisation of EnumNames<E>. The CLI
// parses a flag through it once (launch/config.cpp), checkpoints and log lines print through
// it; no other code compares option strings.
//
//   template <> struct EnumNames<Precision> {
//     static constexpr std::array<EnumName<Precision>, 3> table{{{Precision::fp32, "fp32"}, ...}};
//   };
#pragma once
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "tensor/error.h"

namespace st::runtime {

template <class E>
struct EnumName {
  E value;
  std::string_view name;
};

template <class E>
struct EnumNames;  // specialised beside each enum

template <class E>
concept NamedEnum = std::is_enum_v<E> && requires { EnumNames<E>::table; };

template <NamedEnum E>
constexpr std::string_view name_of(E v) {
  for (const auto& e : EnumNames<E>::table)
    if (e.value == v) return e.name;
  return "?";
}

template <NamedEnum E>
std::string to_string(E v) {
  return std::string(name_of(v));
}

template <NamedEnum E>
std::optional<E> from_name(std::string_view s) {
  for (const auto& e : EnumNames<E>::table)
    if (e.name == s) return e.value;
  return std::nullopt;
}

// "a|b|c" in table order (for --help and error messages).
template <NamedEnum E>
std::string choices_of() {
  std::string out;
  for (const auto& e : EnumNames<E>::table) {
    if (!out.empty()) out += '|';
    out.append(e.name);
  }
  return out;
}

// The value named `s`; ValueError "<what> 's' is not one of a|b|c" otherwise.
template <NamedEnum E>
E parse_enum(std::string_view s, std::string_view what) {
  if (auto v = from_name<E>(s)) return *v;
  ST_THROW(ValueError, what << " '" << s << "' is not one of " << choices_of<E>());
}

}  // namespace st::runtime
