// safetensors reader/writer: validation of the header, then one pread per tensor into aligned
// CPU storage (no whole-file copy). See safetensors.h for the rules enforced.
#include "runtime/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace st::runtime {
namespace {

using json = nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation's limit

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

struct Entry {
  std::string name;
  const FileDType* fdt;
  Shape shape;
  uint64_t begin, end;  // relative to the data buffer
};

// Converts one entry's raw bytes into the tensor dtype (only F64 and U8 need a conversion).
Tensor materialize(const Entry& e, int fd, uint64_t data_start, const std::string& path) {
  Tensor t = Tensor::empty(e.shape, e.fdt->dtype);
  const size_t n = e.end - e.begin;
  if (n == 0) return t;
  if (e.fdt->size == dtype_size(e.fdt->dtype)) {  // stored as read
    pread_all(fd, t.data_ptr(), n, data_start + e.begin, path);
    return t;
  }
  std::vector<unsigned char> raw(n);
  pread_all(fd, raw.data(), n, data_start + e.begin, path);
  const int64_t count = t.numel();
  if (std::strcmp(e.fdt->name, "F64") == 0) {
    float* d = t.data<float>();
    for (int64_t i = 0; i < count; ++i) {
      double v;
      std::memcpy(&v, raw.data() + 8 * i, 8);
      d[i] = static_cast<float>(v);
    }
  } else {  // U8
    int32_t* d = t.data<int32_t>();
    for (int64_t i = 0; i < count; ++i) d[i] = raw[static_cast<size_t>(i)];
  }
  return t;
}

}  // namespace

SafetensorsFile read_safetensors(const std::string& path) {
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
  SafetensorsFile out;
  std::vector<Entry> entries;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) ST_FILE_ERROR(path, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) ST_FILE_ERROR(path, "__metadata__ value of '" << m.key() << "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
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
    e.fdt = find_file_dtype(dt);
    if (!e.fdt) ST_FILE_ERROR(path, "tensor '" << name << "': unsupported dtype '" << dt << "'");
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
    if (overflow || numel > std::numeric_limits<uint64_t>::max() / e.fdt->size)
      ST_FILE_ERROR(path, "tensor '" << name << "': shape " << shape_str(e.shape) << " is too large");
    if (numel * e.fdt->size != e.end - e.begin)
      ST_FILE_ERROR(path, "tensor '" << name << "': shape " << shape_str(e.shape) << " of " << dt << " needs "
                                     << numel * e.fdt->size << " bytes but data_offsets span " << e.end - e.begin);
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

  out.tensors.reserve(entries.size());
  for (const Entry& e : entries) out.tensors.emplace_back(e.name, materialize(e, f.fd, data_start, path));
  return out;
}

std::map<std::string, Tensor> load_safetensors(const std::string& path) {
  std::map<std::string, Tensor> m;
  for (auto& [name, t] : read_safetensors(path).tensors) m.emplace(name, std::move(t));
  return m;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  if (!metadata.empty()) {
    json m = json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  std::vector<Tensor> host;
  host.reserve(tensors.size());
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__") ST_FILE_ERROR(path, "invalid tensor name '" << name << "'");
    if (!names.insert(name).second) ST_FILE_ERROR(path, "tensor '" << name << "' given twice");
    if (!t.defined()) ST_FILE_ERROR(path, "tensor '" << name << "' is undefined");
    const char* dt = file_dtype_name(t.dtype());
    if (!dt) ST_FILE_ERROR(path, "tensor '" << name << "': dtype " << dtype_name(t.dtype()) << " cannot be written");
    Tensor c = t.detach();
    if (c.is_cuda()) c = c.to(Device::cpu);
    c = c.contiguous();
    const uint64_t n = c.nbytes();
    h[name] = {{"dtype", dt}, {"shape", c.shape()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
    host.push_back(std::move(c));
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // pad so the data starts 8-byte aligned
  unsigned char len_bytes[8];
  uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>((len >> (8 * i)) & 0xff);

  Fd f;
  f.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f.fd < 0) ST_FILE_ERROR(path, "cannot create: " << std::strerror(errno));
  write_all(f.fd, len_bytes, 8, path);
  write_all(f.fd, header.data(), header.size(), path);
  for (const Tensor& c : host)
    if (c.nbytes() > 0) write_all(f.fd, c.data_ptr(), c.nbytes(), path);
  if (::fsync(f.fd) != 0) ST_FILE_ERROR(path, "fsync failed: " << std::strerror(errno));
  int fd = f.fd;
  f.fd = -1;
  if (::close(fd) != 0) ST_FILE_ERROR(path, "close failed: " << std::strerror(errno));
}

}  // namespace st::runtime
