// safetensors reader/writer: validation of the header, then positioned reads (one pread per
// contiguous run) into aligned CPU storage, and a streaming writer. See safetensors.h.
#include "runtime/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/common/checksum.h"
#include "runtime/io/safetensors_checksums.h"

namespace st::runtime {
namespace {

using json = nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation's limit
// A checked read goes to the disk in pieces of at most this many bytes (whole chunks when a chunk
// is smaller): the staging buffer of a part's read, and what a chunk's checksum is fed at a time.
constexpr uint64_t kReadPieceBytes = 4ull << 20;

#define ST_FILE_ERROR(path, msg) ST_THROW(IOError, "safetensors " << (path) << ": " << msg)

// A file dtype: its name, its element size on disk, and the tensor dtype it is read into.
struct FileDType {
  const char* name;
  size_t size;
  DType dtype;
  bool writable;
};
constexpr FileDType kFileDTypes[] = {
    {"F32", 4, DType::f32, true},   {"F16", 2, DType::f16, true},   {"BF16", 2, DType::bf16, true},
    {"I32", 4, DType::i32, true},   {"I64", 8, DType::i64, true},   {"F64", 8, DType::f32, false},
    {"U8", 1, DType::i32, false},
};

const FileDType* find_file_dtype(const std::string& name) {
  for (const auto& d : kFileDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

const char* file_dtype_name(DType t) {
  for (const auto& d : kFileDTypes)
    if (d.writable && d.dtype == t) return d.name;
  return nullptr;
}

// RAII file descriptor.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void pread_all(int fd, void* dst, size_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) ST_FILE_ERROR(path, "read failed: " << std::strerror(errno));
    if (r == 0) ST_FILE_ERROR(path, "unexpected end of file at byte " << offset);
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

void write_all(int fd, const void* src, size_t n, const std::string& path) {
  const auto* p = static_cast<const char*>(src);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) ST_FILE_ERROR(path, "write failed: " << std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

uint64_t json_uint(const json& v, const std::string& path, const std::string& what) {
  if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0))
    ST_FILE_ERROR(path, what << " must be a non-negative integer, got " << v.dump());
  return v.get<uint64_t>();
}

std::atomic<uint64_t> g_bytes_read{0};

}  // namespace

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) ST_FILE_ERROR(path, "cannot open: " << std::strerror(errno));
  struct stat sb {};
  if (::fstat(f.fd, &sb) != 0) ST_FILE_ERROR(path, "cannot stat: " << std::strerror(errno));
  const uint64_t file_size = static_cast<uint64_t>(sb.st_size);
  if (file_size < 8) ST_FILE_ERROR(path, "file is " << file_size << " bytes, shorter than the 8-byte header length");

  unsigned char len_bytes[8];
  pread_all(f.fd, len_bytes, 8, 0, path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];  // little-endian
  if (header_len < 2) ST_FILE_ERROR(path, "header length " << header_len << " is too small");
  if (header_len > kMaxHeaderBytes) ST_FILE_ERROR(path, "header length " << header_len << " exceeds the 100 MiB limit");
  if (header_len > file_size - 8)
    ST_FILE_ERROR(path, "header length " << header_len << " runs past the end of the " << file_size << "-byte file");

  std::string header(header_len, '\0');
  pread_all(f.fd, header.data(), header_len, 8, path);
  if (header[0] != '{') ST_FILE_ERROR(path, "header does not start with '{'");
  json h;
  try {
    h = json::parse(header);
  } catch (const json::exception& ex) {
    ST_FILE_ERROR(path, "header is not valid JSON: " << ex.what());
  }
  if (!h.is_object()) ST_FILE_ERROR(path, "header is not a JSON object");

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;
  std::vector<Entry> entries;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) ST_FILE_ERROR(path, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) ST_FILE_ERROR(path, "__metadata__ value of '" << m.key() << "' is not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (name.empty()) ST_FILE_ERROR(path, "a tensor has an empty name");
    if (!v.is_object()) ST_FILE_ERROR(path, "tensor '" << name << "': entry is not an object");
    for (auto k = v.begin(); k != v.end(); ++k)
      if (k.key() != "dtype" && k.key() != "shape" && k.key() != "data_offsets")
        ST_FILE_ERROR(path, "tensor '" << name << "': unknown field '" << k.key() << "'");
    if (!v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      ST_FILE_ERROR(path, "tensor '" << name << "': needs dtype, shape and data_offsets");
    if (!v["dtype"].is_string()) ST_FILE_ERROR(path, "tensor '" << name << "': dtype is not a string");
    Entry e;
    e.name = name;
    const std::string dt = v["dtype"].get<std::string>();
    const FileDType* fdt = find_file_dtype(dt);
    if (!fdt) ST_FILE_ERROR(path, "tensor '" << name << "': unsupported dtype '" << dt << "'");
    e.dtype = fdt->dtype;
    e.file_elem_bytes = fdt->size;
    e.f64 = std::strcmp(fdt->name, "F64") == 0;
    e.file_dtype = fdt->name;
    if (!v["shape"].is_array()) ST_FILE_ERROR(path, "tensor '" << name << "': shape is not an array");
    uint64_t numel = 1;
    bool overflow = false;
    for (const auto& d : v["shape"]) {
      uint64_t n = json_uint(d, path, "tensor '" + name + "': shape entry");
      if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) overflow = true;
      e.shape.push_back(static_cast<int64_t>(n));
      if (n != 0 && numel > std::numeric_limits<uint64_t>::max() / n) overflow = true;
      numel *= n;
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2) ST_FILE_ERROR(path, "tensor '" << name << "': data_offsets is not [begin, end]");
    e.begin = json_uint(off[0], path, "tensor '" + name + "': data_offsets begin");
    e.end = json_uint(off[1], path, "tensor '" + name + "': data_offsets end");
    if (e.end < e.begin) ST_FILE_ERROR(path, "tensor '" << name << "': data_offsets end " << e.end << " < begin " << e.begin);
    if (overflow || numel > std::numeric_limits<uint64_t>::max() / e.file_elem_bytes)
      ST_FILE_ERROR(path, "tensor '" << name << "': shape " << shape_str(e.shape) << " is too large");
    if (numel * e.file_elem_bytes != e.end - e.begin)
      ST_FILE_ERROR(path, "tensor '" << name << "': shape " << shape_str(e.shape) << " of " << dt << " needs "
                                     << numel * e.file_elem_bytes << " bytes but data_offsets span " << e.end - e.begin);
    if (e.end > data_size)
      ST_FILE_ERROR(path, "tensor '" << name << "': data_offsets [" << e.begin << ", " << e.end
                                     << "] run past the end of the " << data_size << "-byte data buffer");
    entries.push_back(std::move(e));
  }

  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < pos)
      ST_FILE_ERROR(path, "tensor '" << e.name << "' [" << e.begin << ", " << e.end << "] overlaps tensor '"
                                     << prev->name << "' [" << prev->begin << ", " << prev->end << "]");
    if (e.begin > pos)
      ST_FILE_ERROR(path, "gap of " << e.begin - pos << " bytes before tensor '" << e.name << "' at offset " << pos);
    pos = e.end;
    prev = &e;
  }
  if (pos != data_size)
    ST_FILE_ERROR(path, data_size - pos << " bytes after the last tensor are not described by the header");
  entries_ = std::move(entries);
  for (size_t k = 0; k < entries_.size(); ++k) index_[entries_[k].name] = k;
  header64_ = runtime::header_checksum(header, path);
  load_checksums(path);
  data_start_ = data_start;
  data_size_ = data_size;
  fd_ = f.fd;
  f.fd = -1;  // kept open for the reads
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsReader::load_checksums(const std::string& path) {
  auto meta = [&](const char* key) -> const std::string* {
    auto it = metadata_.find(key);
    return it == metadata_.end() ? nullptr : &it->second;
  };
  if (const std::string* entries = meta(kEntriesKey)) {  // each entry as written: names the one edited
    const std::vector<uint64_t> want = parse_checksum_list(*entries, entries->size() / 16, path, kEntriesKey);
    if (want.size() != entries_.size())
      ST_FILE_ERROR(path, "the header lists " << entries_.size() << " tensors, its checksums " << entries->size() / 16
                                              << ": the header changed after it was written");
    for (size_t k = 0; k < entries_.size(); ++k) {
      const Entry& e = entries_[k];
      if (entry_checksum(e.name, e.file_dtype, e.shape, e.begin, e.end) != want[k])
        ST_FILE_ERROR(path, "tensor '" << e.name << "': its header entry (dtype " << e.file_dtype << ", shape "
                                       << shape_str(e.shape) << ", data_offsets [" << e.begin << ", " << e.end
                                       << "]) does not match its checksum: the header changed after it was written");
    }
  }
  if (const std::string* stored = meta(kHeaderKey)) {
    uint64_t want = 0;
    if (!parse_checksum_hex(*stored, want)) ST_FILE_ERROR(path, kHeaderKey << " '" << *stored << "' is not 16 hex digits");
    if (want != header64_)
      ST_FILE_ERROR(path, "the header does not match its checksum (" << kHeaderKey << " " << *stored
                                                                     << ", the header gives " << checksum_hex(header64_)
                                                                     << "): the header changed after it was written");
  }
  if (const std::string* chunks = meta(kChunksKey)) {
    if (!meta(kHeaderKey) || !meta(kEntriesKey) || !meta(kChunkBytesKey))
      ST_FILE_ERROR(path, "has " << kChunksKey << " but not " << kHeaderKey << ", " << kEntriesKey << " and "
                                 << kChunkBytesKey << ": the header changed after it was written");
    const std::string& cb = *meta(kChunkBytesKey);
    uint64_t chunk = 0;
    for (char ch : cb) chunk = ch >= '0' && ch <= '9' && chunk < (1ull << 40) ? chunk * 10 + (ch - '0') : 0;
    if (cb.empty() || chunk == 0 || chunk % 8 != 0)
      ST_FILE_ERROR(path, kChunkBytesKey << " '" << cb << "' is not a positive multiple of 8");
    size_t n = 0;
    for (Entry& e : entries_) {
      e.chunk_bytes = chunk;
      e.first_sum = n;
      n += chunk_count(e.end - e.begin, chunk);
    }
    sums_ = parse_checksum_list(*chunks, n, path, kChunksKey);
  } else if (const std::string* whole = meta(kLegacyChecksumKey)) {  // older files: one chunk = the tensor
    sums_ = parse_checksum_list(*whole, entries_.size(), path, kLegacyChecksumKey);
    for (size_t k = 0; k < entries_.size(); ++k) {
      entries_[k].chunk_bytes = entries_[k].end - entries_[k].begin;  // 0 (empty): nothing to check
      entries_[k].first_sum = k;
    }
  }
  checked_ = meta(kChunksKey) || meta(kLegacyChecksumKey);
  std::erase_if(metadata_, [](const auto& kv) { return is_checksum_key(kv.first); });
}

const SafetensorsReader::Entry* SafetensorsReader::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

const SafetensorsReader::Entry& SafetensorsReader::entry(const std::string& name) const {
  const Entry* e = find(name);
  if (!e) ST_FILE_ERROR(path_, "no tensor named '" << name << "'");
  return *e;
}

uint64_t SafetensorsReader::data_bytes() const { return data_size_; }

bool SafetensorsReader::has_checksums() const { return checked_; }

void SafetensorsReader::fetch(const Entry& e, std::vector<ByteRun> runs) const {
  std::erase_if(runs, [](const ByteRun& r) { return r.n == 0; });
  if (runs.empty()) return;
  const uint64_t base = data_start_ + e.begin, size = e.end - e.begin;
  auto read_at = [&](unsigned char* dst, uint64_t from, uint64_t n) {
    g_bytes_read.fetch_add(n, std::memory_order_relaxed);
    pread_all(fd_, dst, n, base + from, path_);
  };
  if (e.chunk_bytes == 0) {  // nothing to check against (another writer's file, an empty tensor)
    for (const ByteRun& r : runs) read_at(r.dst, r.at, r.n);
    return;
  }
  std::sort(runs.begin(), runs.end(), [](const ByteRun& a, const ByteRun& b) { return a.at < b.at; });
  const uint64_t chunk = e.chunk_bytes;
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // the touched chunks, merged: [first, last + 1)
  for (const ByteRun& r : runs) {
    const uint64_t c0 = r.at / chunk, c1 = chunk_count(r.at + r.n, chunk);
    if (!spans.empty() && c0 <= spans.back().second)
      spans.back().second = std::max(spans.back().second, c1);
    else
      spans.emplace_back(c0, c1);
  }
  // pieces of whole chunks (a chunk larger than a piece — an older file's whole tensor — is fed
  // to its checksum over several pieces)
  const uint64_t piece = chunk <= kReadPieceBytes ? kReadPieceBytes / chunk * chunk : kReadPieceBytes;
  std::vector<unsigned char> stage;
  size_t lo = 0;  // runs before it end before the current piece
  for (const auto& [c0, c1] : spans) {
    uint64_t c = c0;
    Checksum64 sum;
    const uint64_t end = std::min(c1 * chunk, size);
    for (uint64_t ps = c0 * chunk; ps < end;) {
      const uint64_t pe = std::min(end, ps + piece);
      while (lo < runs.size() && runs[lo].at + runs[lo].n <= ps) ++lo;
      unsigned char* buf = nullptr;  // straight into a run that holds the whole piece
      for (size_t k = lo; k < runs.size() && runs[k].at <= ps && !buf; ++k)
        if (runs[k].at + runs[k].n >= pe) buf = runs[k].dst + (ps - runs[k].at);
      const bool direct = buf != nullptr;
      if (!direct) {
        stage.resize(pe - ps);
        buf = stage.data();
      }
      read_at(buf, ps, pe - ps);
      for (uint64_t at = ps; at < pe;) {  // each chunk's checksum, checked at its last byte
        const uint64_t chunk_end = std::min((c + 1) * chunk, size), upto = std::min(chunk_end, pe);
        sum.update(buf + (at - ps), upto - at);
        at = upto;
        if (at < chunk_end) break;
        const uint64_t want = sums_[e.first_sum + c], got = sum.digest();
        if (got != want)
          ST_FILE_ERROR(path_, "tensor '" << e.name << "' does not match its checksum (bytes [" << c * chunk << ", "
                                          << chunk_end << ") of its " << size << ": the header says "
                                          << checksum_hex(want) << ", the bytes give " << checksum_hex(got)
                                          << "): the file changed after it was written");
        ++c;
        sum = Checksum64();
      }
      if (!direct)
        for (size_t k = lo; k < runs.size() && runs[k].at < pe; ++k) {
          const uint64_t a = std::max(runs[k].at, ps), b = std::min(runs[k].at + runs[k].n, pe);
          if (a < b) std::memcpy(runs[k].dst + (a - runs[k].at), buf + (a - ps), b - a);
        }
      ps = pe;
    }
  }
}

void SafetensorsReader::read_elements(const Entry& e, const std::vector<Run>& runs, void* dst) const {
  const size_t fb = e.file_elem_bytes, tb = dtype_size(e.dtype);
  auto* out = static_cast<unsigned char*>(dst);
  std::vector<ByteRun> bytes;
  bytes.reserve(runs.size());
  if (fb == tb) {  // stored as read
    for (const Run& r : runs)
      bytes.push_back({static_cast<uint64_t>(r.from) * fb, static_cast<uint64_t>(r.length) * fb, out + r.to * tb});
    fetch(e, std::move(bytes));
    return;
  }
  int64_t total = 0;  // F64 or U8: the file's bytes first, converted after
  for (const Run& r : runs) total += r.length;
  std::vector<unsigned char> raw(static_cast<size_t>(total) * fb);
  int64_t at = 0;
  for (const Run& r : runs) {
    bytes.push_back({static_cast<uint64_t>(r.from) * fb, static_cast<uint64_t>(r.length) * fb, raw.data() + at * fb});
    at += r.length;
  }
  fetch(e, std::move(bytes));
  at = 0;
  for (const Run& r : runs) {
    for (int64_t i = 0; i < r.length; ++i) {
      const unsigned char* src = raw.data() + (at + i) * fb;
      if (e.f64) {
        double v;
        std::memcpy(&v, src, 8);
        static_cast<float*>(dst)[r.to + i] = static_cast<float>(v);
      } else {  // U8
        static_cast<int32_t*>(dst)[r.to + i] = *src;
      }
    }
    at += r.length;
  }
}

Tensor SafetensorsReader::read(const std::string& name) const {
  const Entry& e = entry(name);
  Tensor t = Tensor::empty(e.shape, e.dtype);
  read_elements(e, {{0, 0, t.numel()}}, t.data_ptr());
  return t;
}

Tensor SafetensorsReader::read_ranges(const std::string& name, int64_t dim, const std::vector<DimRange>& ranges) const {
  const Entry& e = entry(name);
  const int64_t nd = static_cast<int64_t>(e.shape.size());
  if (nd == 0) {
    if (ranges.size() != 1 || ranges[0].start != 0 || ranges[0].length != 1)
      ST_FILE_ERROR(path_, "tensor '" << name << "' is a scalar: only the whole of it can be read");
    return read(name);
  }
  if (dim < 0 || dim >= nd) ST_FILE_ERROR(path_, "tensor '" << name << "': no dim " << dim << " in " << shape_str(e.shape));
  Shape out_shape = e.shape;
  int64_t local = 0;
  for (const DimRange& r : ranges) {
    if (r.start < 0 || r.length < 0 || r.start + r.length > e.shape[dim])
      ST_FILE_ERROR(path_, "tensor '" << name << "': positions [" << r.start << ", " << r.start + r.length
                                      << ") outside dim " << dim << " of " << shape_str(e.shape));
    local += r.length;
  }
  out_shape[dim] = local;
  Tensor t = Tensor::empty(out_shape, e.dtype);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= e.shape[d];
  for (int64_t d = dim + 1; d < nd; ++d) inner *= e.shape[d];
  std::vector<Run> runs;  // one per contiguous run of the file
  for (int64_t o = 0; o < outer; ++o) {
    int64_t acc = 0;
    for (const DimRange& r : ranges) {
      runs.push_back({(o * e.shape[dim] + r.start) * inner, (o * local + acc) * inner, r.length * inner});
      acc += r.length;
    }
  }
  read_elements(e, runs, t.data_ptr());
  return t;
}

Tensor SafetensorsReader::read_runs(const std::string& name, const std::vector<Run>& runs, int64_t n) const {
  const Entry& e = entry(name);
  const int64_t total = shape_numel(e.shape);
  Tensor t = Tensor::zeros({n}, e.dtype);  // (n,)
  std::vector<Run> parts;
  for (const Run& r : runs) {
    if (r.from < 0 || r.length < 0 || r.from + r.length > total || r.to < 0 || r.to + r.length > n)
      ST_FILE_ERROR(path_, "tensor '" << name << "': elements [" << r.from << ", " << r.from + r.length
                                      << ") into [" << r.to << ", " << r.to + r.length << ") of " << n
                                      << " do not fit its " << total);
    parts.push_back({r.from, r.to, r.length});
  }
  read_elements(e, parts, t.data_ptr());
  return t;
}

uint64_t safetensors_bytes_read() { return g_bytes_read.load(std::memory_order_relaxed); }

SafetensorsFile read_safetensors(const std::string& path) {
  SafetensorsReader r(path);
  SafetensorsFile out;
  out.metadata = r.metadata();
  out.tensors.reserve(r.entries().size());
  for (const auto& e : r.entries()) out.tensors.emplace_back(e.name, r.read(e.name));
  return out;
}

std::map<std::string, Tensor> load_safetensors(const std::string& path) {
  std::map<std::string, Tensor> m;
  for (auto& [name, t] : read_safetensors(path).tensors) m.emplace(name, std::move(t));
  return m;
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, const std::vector<Spec>& specs,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), specs_(specs) {
  json h = json::object();
  json m = json::object();
  for (const auto& [k, v] : metadata) {
    if (is_checksum_key(k)) ST_FILE_ERROR(path, "metadata key '" << k << "' is the writer's own");
    m[k] = v;
  }
  uint64_t offset = 0, chunks = 0;
  std::set<std::string> names;
  std::string entries;  // 16 hex digits per tensor (runtime/io/safetensors_checksums.h)
  json tensors = json::object();
  for (const Spec& s : specs_) {
    if (s.name.empty() || s.name == "__metadata__") ST_FILE_ERROR(path, "invalid tensor name '" << s.name << "'");
    if (!names.insert(s.name).second) ST_FILE_ERROR(path, "tensor '" << s.name << "' given twice");
    const char* dt = file_dtype_name(s.dtype);
    if (!dt) ST_FILE_ERROR(path, "tensor '" << s.name << "': dtype " << dtype_name(s.dtype) << " cannot be written");
    const uint64_t n = static_cast<uint64_t>(shape_numel(s.shape)) * dtype_size(s.dtype);
    tensors[s.name] = {{"dtype", dt}, {"shape", s.shape}, {"data_offsets", {offset, offset + n}}};
    entries += checksum_hex(entry_checksum(s.name, dt, s.shape, offset, offset + n));
    chunks += chunk_count(n, kChecksumChunkBytes);
    offset += n;
  }
  m[kChunkBytesKey] = std::to_string(kChecksumChunkBytes);
  m[kEntriesKey] = entries;
  m[kChunksKey] = std::string(16 * chunks, '0');  // filled in by finish(), as is the header's own
  m[kHeaderKey] = std::string(16, '0');
  h["__metadata__"] = m;
  for (auto& [name, entry] : tensors.items()) h[name] = entry;
  header_ = h;
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // pad so the data starts 8-byte aligned
  header_bytes_ = header.size();
  unsigned char len_bytes[8];
  uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>((len >> (8 * i)) & 0xff);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) ST_FILE_ERROR(path, "cannot create: " << std::strerror(errno));
  write_all(fd_, len_bytes, 8, path);
  write_all(fd_, header.data(), header.size(), path);
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsWriter::write(const Tensor& t) {
  if (next_ >= specs_.size()) ST_FILE_ERROR(path_, "more tensors than the header lists (" << specs_.size() << ")");
  const Spec& s = specs_[next_];
  if (!t.defined()) ST_FILE_ERROR(path_, "tensor '" << s.name << "' is undefined");
  if (t.dtype() != s.dtype || t.shape() != s.shape)
    ST_FILE_ERROR(path_, "tensor '" << s.name << "' is " << t.describe() << ", the header says "
                                    << dtype_name(s.dtype) << " " << shape_str(s.shape));
  Tensor c = t.detach();
  if (c.is_cuda()) c = c.to(Device::cpu);
  c = c.contiguous();
  write_bytes(c.data_ptr(), c.nbytes());
}

void SafetensorsWriter::write_bytes(const void* data, size_t n) {
  if (next_ >= specs_.size()) ST_FILE_ERROR(path_, "more tensors than the header lists (" << specs_.size() << ")");
  const Spec& s = specs_[next_];
  const uint64_t want = static_cast<uint64_t>(shape_numel(s.shape)) * dtype_size(s.dtype);
  if (n != want) ST_FILE_ERROR(path_, "tensor '" << s.name << "' is " << n << " bytes, the header says " << want);
  if (n > 0) write_all(fd_, data, n, path_);
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (uint64_t at = 0; at < n; at += kChecksumChunkBytes)  // one checksum per chunk
    chunks_ += checksum_hex(checksum64(bytes + at, std::min<uint64_t>(kChecksumChunkBytes, n - at)));
  ++next_;
}

void SafetensorsWriter::finish() {
  if (next_ != specs_.size())
    ST_FILE_ERROR(path_, next_ << " of the header's " << specs_.size() << " tensors were written");
  // the header again, its checksums filled in: the same length, as the placeholders had 16 digits
  // each; the header's own checksum last, over the header with every other value final
  header_["__metadata__"][kChunksKey] = chunks_;
  header_["__metadata__"][kHeaderKey] = checksum_hex(header_checksum(header_.dump(), path_));
  std::string header = header_.dump();
  header.append(header_bytes_ - header.size(), ' ');
  for (size_t done = 0; done < header.size();) {
    const ssize_t w = ::pwrite(fd_, header.data() + done, header.size() - done, static_cast<off_t>(8 + done));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) ST_FILE_ERROR(path_, "write failed: " << std::strerror(errno));
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd_) != 0) ST_FILE_ERROR(path_, "fsync failed: " << std::strerror(errno));
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) ST_FILE_ERROR(path_, "close failed: " << std::strerror(errno));
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsWriter::Spec> specs;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) ST_FILE_ERROR(path, "tensor '" << name << "' is undefined");
    specs.push_back({name, t.dtype(), t.shape()});
  }
  SafetensorsWriter w(path, specs, metadata);
  for (const auto& [name, t] : tensors) w.write(t);
  w.finish();
}

}  // namespace st::runtime
