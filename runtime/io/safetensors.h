// Own reader and writer of the safetensors format (what Hugging Face's save_pretrained writes):
//   8-byte little-endian header length N, then N bytes of JSON
//   {"__metadata__": {"k": "v"}, "name": {"dtype": "F32", "shape": [64, 192],
//    "data_offsets": [begin, end]}, ...}, then the data buffer (offsets are relative to it).
// The reader trusts nothing: the header must be a JSON object, every entry must have exactly
// dtype/shape/data_offsets, the dtype must be known, shape × dtype size must equal the offset
// span, and the tensors must tile the data buffer exactly (no overlap, no gap, no trailing
// bytes — the same rule as the reference implementation). Any violation throws st::IOError
// naming the file and the problem.
//
// Reads are positioned (pread) and on request: SafetensorsReader validates the header when it
// opens the file and then reads one tensor, or the ranges of one dim of it (a tensor-parallel
// shard's rows or columns), straight into aligned CPU storage — one pread per contiguous run of
// bytes, never the whole file. safetensors_bytes_read() counts the tensor bytes read by this
// process (what a sharded load is checked against). The writer streams too: the header is
// written from the names, dtypes and shapes, then each tensor in turn (SafetensorsWriter), so a
// caller may produce one tensor at a time.
//
// Checksums (runtime/io/safetensors_checksums.h has the layout and why): the writer stores, in
// the metadata, a checksum64 (runtime/common/checksum.h) of every 64 KiB chunk of every tensor,
// of every header entry and of the canonical header itself. The reader checks the header and its
// entries when it opens the file (an IOError names the file and, for an edited entry — another
// dtype, shape, offsets or name — the tensor) and every chunk a read touches, whatever the read:
// a whole tensor, a tensor-parallel slice, a ZeRO-3 window (a partial read reads and checks the
// rest of each chunk it touches; an IOError names the file, the tensor and the chunk's bytes).
// Files of our older format (one checksum per whole tensor, "shardtrain.checksum64") stay
// readable: a part of a tensor is then checked by reading all of it, a piece at a time. Files
// from other writers (Hugging Face's) have none and read unchecked. The keys are the writer's
// own: they are not in metadata() and a caller cannot pass them. header_checksum() is the
// checksum of the file's canonical header as read, whatever the file (what a checkpoint's
// state.json records of each of its files: runtime/io/checkpoint_dir.h).
//
// dtypes: F32 F16 BF16 I32 I64 are read and written; F64 (read as f32) and U8 (read as i32) are
// read-only conveniences.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/common/named_tensors.h"
#include "runtime/common/shard_spec.h"
#include "tensor/tensor.h"

namespace st::runtime {

struct SafetensorsFile {
  NamedTensors tensors;  // in data-buffer order (the order they were written)
  std::map<std::string, std::string> metadata;  // "__metadata__" (may be empty)
};

class SafetensorsReader {
 public:
  struct Entry {
    std::string name;
    DType dtype;             // as read (F64 → f32, U8 → i32)
    Shape shape;
    uint64_t begin, end;     // byte offsets in the data buffer
    size_t file_elem_bytes;  // element size on disk
    bool f64 = false;        // stored as F64 (converted on read)
    std::string file_dtype;  // the header's ("F32", ...)
    uint64_t chunk_bytes = 0;  // the bytes each checksum covers (older files: all of them); 0: unchecked
    size_t first_sum = 0;      // its first chunk's index in the file's list of checksums
  };
  // Opens and validates the header; no tensor data is read.
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<Entry>& entries() const { return entries_; }  // in data-buffer order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }  // without the checksums
  bool has_checksums() const;  // written by SafetensorsWriter (this version's or an older one)
  uint64_t header_checksum() const { return header64_; }  // of the canonical header as read
  const Entry* find(const std::string& name) const;  // null when absent
  uint64_t data_bytes() const;                       // the data buffer's size

  // The whole tensor (a fresh contiguous CPU tensor). IOError when `name` is absent.
  Tensor read(const std::string& name) const;
  // Along `dim`, the positions of `ranges` in order, concatenated: shape = the tensor's with
  // dim's size = Σ lengths. Only those bytes are read (with checksums: and the rest of the chunks
  // they touch).
  Tensor read_ranges(const std::string& name, int64_t dim, const std::vector<DimRange>& ranges) const;
  // Runs of the flattened tensor: a (n,) tensor whose elements [to, to + length) are the file's
  // [from, from + length), for each run; elements no run covers are zero. Only those bytes are
  // read (and, in a file with checksums, the rest of the chunks they touch, to check them).
  struct Run {
    int64_t from = 0, to = 0, length = 0;
  };
  Tensor read_runs(const std::string& name, const std::vector<Run>& runs, int64_t n) const;

 private:
  struct ByteRun {
    uint64_t at = 0, n = 0;      // bytes [at, at + n) of a tensor's data
    unsigned char* dst = nullptr;  // where they go
  };
  const Entry& entry(const std::string& name) const;
  void load_checksums(const std::string& path);
  // The file's bytes of each run into its dst; with checksums, every chunk touched is read whole
  // (in pieces of at most 4 MiB) and checked. IOError naming the tensor on a mismatch.
  void fetch(const Entry& e, std::vector<ByteRun> runs) const;
  // Elements of `e` (Run: file elements [from, from + length) → dst elements [to, …)) into dst,
  // converted to the tensor dtype.
  void read_elements(const Entry& e, const std::vector<Run>& runs, void* dst) const;
  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0, data_size_ = 0;
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  std::vector<uint64_t> sums_;  // every chunk's checksum (Entry::first_sum indexes it); empty: none
  bool checked_ = false;
  uint64_t header64_ = 0;
};

// Tensor bytes read from safetensors files by this process so far.
uint64_t safetensors_bytes_read();

// Reads and validates a whole file; every tensor is a fresh contiguous CPU tensor.
SafetensorsFile read_safetensors(const std::string& path);

// Same, as a name → tensor map.
std::map<std::string, Tensor> load_safetensors(const std::string& path);

// Writes a file whose header lists `specs` (name, dtype, shape) in order; then write() takes
// each tensor in that order (any device, any strides; copied to contiguous CPU bytes one at a
// time) and finish() fsyncs and closes. Names must be unique and non-empty. Writes `path`
// directly (callers that need atomicity write under a temporary name and rename, as
// runtime/io/checkpoint_dir does).
class SafetensorsWriter {
 public:
  struct Spec {
    std::string name;
    DType dtype;
    Shape shape;
  };
  SafetensorsWriter(const std::string& path, const std::vector<Spec>& specs,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  void write(const Tensor& t);  // the next tensor of the header's order; its dtype and shape
  // The next tensor's bytes, contiguous, as many as its dtype and shape take (what write() does
  // after its copy to the host; touches no tensor, so a writer thread may call it).
  void write_bytes(const void* data, size_t bytes);
  void finish();                // after the last tensor: fsync, close

 private:
  std::string path_;
  std::vector<Spec> specs_;
  size_t next_ = 0;
  int fd_ = -1;
  nlohmann::ordered_json header_;  // as first written, to rewrite with the checksums
  size_t header_bytes_ = 0;        // its length on disk, padding included
  std::string chunks_;             // 16 hex digits per chunk written so far
};

// The whole list at once (SafetensorsWriter over the tensors' own dtypes and shapes).
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace st::runtime
