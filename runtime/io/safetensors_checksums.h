// What our safetensors writer stores so that every read can be checked on its own, whatever part
// of a tensor it reads (runtime/io/safetensors.h reads and writes it). Four metadata keys, all
// strings, the writer's own (a caller cannot pass them):
//   "shardtrain.chunk_bytes"  the chunk size C in bytes (65536)
//   "shardtrain.chunks64"     16 hex digits (checksum64, runtime/common/checksum.h) per chunk: each
//                             tensor's bytes cut into ⌈bytes / C⌉ chunks from its first byte (the last
//                             one shorter), tensors in data-buffer order
//   "shardtrain.entries64"    16 hex digits per tensor, data-buffer order: the checksum of its header
//                             entry (name, dtype, shape, data_offsets), so an edited entry is named
//   "shardtrain.header64"     the checksum of the canonical header: the JSON parsed, this key removed,
//                             dumped compactly with sorted keys (whitespace and key order do not
//                             count; every name, dtype, shape, offset and metadata value does)
// A read of any part of a tensor (a tp slice, a ZeRO-3 window) reads and checks every chunk it
// touches whole, so it reads at most C − 1 extra bytes at each end of each contiguous run.
//
// Why 64 KiB: a chunk costs 16 header bytes, 0.024 % of the data (a 10 GB file: a 2.5 MB
// header; the format's 100 MiB header limit is reached at 400 GB per file); the extra bytes of a
// partial read (≤ 2 × 64 KiB per run) are within Linux's default 128 KiB read-ahead, so the disk
// reads little it would not have read anyway; a ZeRO-3 piece of a 124M-parameter GPT at dp 8 (~1.2
// MB of c_fc) reads ~10 % more. A column slice of a row-major tensor (a column-parallel weight
// under tp) touches every chunk when its rows are shorter than C: that rank reads the whole
// tensor, 64 KiB at a time, and keeps only its slice.
//
// Older files (before this layout) carry "shardtrain.checksum64": one checksum of each whole
// tensor; they stay readable, a part of a tensor then read by reading and checking all of it.
// The header's own checksum is also recorded outside the file, in the checkpoint's state.json
// (runtime/io/checkpoint_dir.h), where a header edit or a rewrite without our keys cannot fix it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace st::runtime {

constexpr uint64_t kChecksumChunkBytes = 64ull << 10;

constexpr const char* kChunkBytesKey = "shardtrain.chunk_bytes";
constexpr const char* kChunksKey = "shardtrain.chunks64";
constexpr const char* kEntriesKey = "shardtrain.entries64";
constexpr const char* kHeaderKey = "shardtrain.header64";
constexpr const char* kLegacyChecksumKey = "shardtrain.checksum64";  // older files: one per tensor

// Whether `key` is one of the writer's own metadata keys (above).
bool is_checksum_key(const std::string& key);

// ⌈bytes / chunk⌉ (0 for an empty tensor).
uint64_t chunk_count(uint64_t bytes, uint64_t chunk);

// The checksum of one header entry.
uint64_t entry_checksum(const std::string& name, const std::string& dtype, const Shape& shape, uint64_t begin,
                        uint64_t end);

// The checksum of the canonical form of a header's JSON text (see above). IOError naming `path`
// when the text is not a JSON object.
uint64_t header_checksum(const std::string& header_text, const std::string& path);

// Parses 16 hex digits per value of `hex` (IOError naming `path` and `key` when malformed or when
// there are not `count` of them).
std::vector<uint64_t> parse_checksum_list(const std::string& hex, size_t count, const std::string& path,
                                          const std::string& key);

}  // namespace st::runtime
