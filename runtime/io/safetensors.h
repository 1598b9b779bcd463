// Own reader and writer of the safetensors format (what Hugging Face's save_pretrained writes):
//   8-byte little-endian header length N, then N bytes of JSON
//   {"__metadata__": {"k": "v"}, "name": {"dtype": "F32", "shape": [64, 192],
//    "data_offsets": [begin, end]}, ...}, then the data buffer (offsets are relative to it).
// The reader trusts nothing: the header must be a JSON object, every entry must have exactly
// dtype/shape/data_offsets, the dtype must be known, shape × dtype size must equal the offset
// span, and the tensors must tile the data buffer exactly (no overlap, no gap, no trailing
// bytes — the same rule as the reference implementation). Any violation throws st::IOError
// naming the file and the problem. Tensors are read straight into (aligned) CPU storage.
//
// dtypes: F32 F16 BF16 I32 I64 are read and written; F64 (read as f32) and U8 (read as i32) are
// read-only conveniences.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "runtime/common/named_tensors.h"
#include "tensor/tensor.h"

namespace st::runtime {

struct SafetensorsFile {
  NamedTensors tensors;  // in data-buffer order (the order they were written)
  std::map<std::string, std::string> metadata;  // "__metadata__" (may be empty)
};

// Reads and validates a whole file; every tensor is a fresh contiguous CPU tensor.
SafetensorsFile read_safetensors(const std::string& path);

// Same, as a name → tensor map.
std::map<std::string, Tensor> load_safetensors(const std::string& path);

// Writes `tensors` (any device, any strides; copied to contiguous CPU bytes) in the given order,
// with `metadata` as "__metadata__" when not empty. Names must be unique and non-empty. Writes
// to `path` directly and fsyncs it (callers that need atomicity write to a temporary name and
// rename, as runtime/io/checkpoint_dir does).
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace st::runtime
