// Validating a subsystem's options where they are defined. Each options struct of a wing
// (runtime/optim/optimizer_options.h, runtime/parallel/parallel_options.h, ...) has
//   void validate(const OptionFail& fail) const;
// which calls fail(flag, why) for the first bad value: `flag` is the CLI's name of the field
// (docs/design.md's flags, without "--"), `why` what is wrong and what was given. The CLI passes a
// fail that throws its usage error naming the flag and where it was set (launch/config.cpp); code
// that builds options itself can pass throw_on_fail. fail must not return.
#pragma once
#include <functional>
#include <sstream>
#include <string>

#include "tensor/error.h"

namespace st::runtime {

using OptionFail = std::function<void(const std::string& flag, const std::string& why)>;

// Throws ValueError("--flag: why").
inline void throw_on_fail(const std::string& flag, const std::string& why) {
  ST_THROW(ValueError, "--" << flag << ": " << why);
}

// The checks every wing repeats, with the CLI's wording.
inline std::string option_str(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}
inline void require_positive(const OptionFail& fail, const std::string& flag, double v) {
  if (!(v > 0)) fail(flag, "must be positive, got " + option_str(v));
}
inline void require_non_negative(const OptionFail& fail, const std::string& flag, double v) {
  if (!(v >= 0)) fail(flag, "must be >= 0, got " + option_str(v));
}

}  // namespace st::runtime
