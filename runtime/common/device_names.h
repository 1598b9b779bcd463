// The spelling of tensor/'s Device for options and checkpoints: "cpu", "cuda".
#pragma once
#include "runtime/common/enum_names.h"
#include "tensor/dtype.h"  // Device

namespace st::runtime {

template <>
struct EnumNames<Device> {
  static constexpr std::array<EnumName<Device>, 2> table{{{Device::cpu, "cpu"}, {Device::cuda, "cuda"}}};
};

}  // namespace st::runtime
