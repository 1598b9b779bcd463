// NamedTensors: tensors by full parameter name, in a stated order (registration order for a
// model's parameters, data-buffer order for a safetensors file). A vector of pairs, not a map,
// because the order is part of the meaning: buckets, shards and files are cut along it.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace st::runtime {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

}  // namespace st::runtime
