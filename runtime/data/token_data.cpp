// llm.c token files: mmap + validation, sequence slicing in docs/design.md's order, atomic writer.
#include "runtime/data/token_data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "runtime/common/json_io.h"
#include "tensor/philox.h"

namespace st::runtime {

#define ST_TOKEN_ERROR(path, msg) ST_THROW(IOError, "token file " << (path) << ": " << msg)

int64_t SequenceOrder::index(int64_t i, int64_t n) const {
  if (!shuffle) return i % n;
  const uint64_t pass = static_cast<uint64_t>(i / n), q = static_cast<uint64_t>(i % n);
  int half = 1;  // bits per Feistel half: 4^half ≥ n (n < 2^31: half ≤ 16)
  while ((uint64_t{1} << (2 * half)) < static_cast<uint64_t>(n)) ++half;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  const uint64_t key = seed ^ 0x5368756666756c65ull;  // "Shuffle": apart from the seed's other streams
  auto permute = [&](uint64_t x) {
    uint64_t l = x >> half, r = x & mask;
    for (uint64_t round = 0; round < 6; ++round) {
      const uint64_t f = philox4x32_10(key, (pass << 24) | (round << 16) | r).x[0] & mask;  // r < 2^16
      const uint64_t next = l ^ f;
      l = r;
      r = next;
    }
    return (l << half) | r;
  };
  uint64_t y = permute(q);
  while (y >= static_cast<uint64_t>(n)) y = permute(y);  // cycle walking: back into [0, n)
  return static_cast<int64_t>(y);
}

TokenData::TokenData(const std::string& path, SequenceOrder order) : path_(path), order_(order) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) ST_TOKEN_ERROR(path, "cannot open: " << std::strerror(errno));
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) {
    int err = errno;
    ::close(fd);
    ST_TOKEN_ERROR(path, "cannot stat: " << std::strerror(err));
  }
  const auto size = static_cast<uint64_t>(sb.st_size);
  const uint64_t header_bytes = kTokenHeaderInts * 4;
  if (size < header_bytes) {
    ::close(fd);
    ST_TOKEN_ERROR(path, "file is " << size << " bytes, shorter than the " << header_bytes
                                     << "-byte header: not a token file; to train on a text file, make one with "
                                        "`shardtrain prepare --text FILE --out FILE.bin`");
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);
  if (m == MAP_FAILED) ST_TOKEN_ERROR(path, "mmap failed: " << std::strerror(err));
  map_ = m;
  map_bytes_ = size;
  int32_t hdr[3];
  std::memcpy(hdr, m, sizeof(hdr));
  auto fail = [&](const std::string& msg) {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    ST_TOKEN_ERROR(path, msg);
  };
  if (hdr[0] != kTokenMagic)
    fail("not a token file (bad magic " + std::to_string(hdr[0]) + ", expected " + std::to_string(kTokenMagic) +
         ": an llm.c .bin file); to train on a text file, make one with `shardtrain prepare --text FILE --out FILE.bin`");
  if (hdr[1] != kTokenVersion && hdr[1] != kTokenVersion32)
    fail("unsupported version " + std::to_string(hdr[1]) + " (expected " + std::to_string(kTokenVersion) +
         ": uint16 tokens, or " + std::to_string(kTokenVersion32) + ": uint32 tokens)");
  if (hdr[2] < 0) fail("negative token count " + std::to_string(hdr[2]));
  width_ = hdr[1] == kTokenVersion32 ? 4 : 2;
  const uint64_t want = header_bytes + static_cast<uint64_t>(width_) * static_cast<uint64_t>(hdr[2]);
  if (size < want)
    fail("header says " + std::to_string(hdr[2]) + " tokens (" + std::to_string(want) + " bytes) but the file has only " +
         std::to_string(size) + " bytes (truncated)");
  if (size > want)
    fail("header says " + std::to_string(hdr[2]) + " tokens (" + std::to_string(want) + " bytes) but the file has " +
         std::to_string(size) + " bytes (trailing data)");
  count_ = hdr[2];
  tokens_ = static_cast<const unsigned char*>(m) + header_bytes;
  ::madvise(m, size, MADV_RANDOM);
}

TokenData::~TokenData() {
  if (map_) ::munmap(map_, map_bytes_);
}

uint32_t TokenData::at(int64_t i) const {
  const unsigned char* p = tokens_ + static_cast<size_t>(i) * static_cast<size_t>(width_);  // little-endian
  return width_ == 2 ? uint32_t{p[0]} | uint32_t{p[1]} << 8
                     : uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

uint32_t TokenData::token(int64_t i) const {
  if (i < 0 || i >= count_) ST_THROW(ValueError, "token file " << path_ << ": token " << i << " out of range [0, " << count_ << ")");
  return at(i);
}

std::vector<uint32_t> TokenData::tokens(int64_t first, int64_t count) const {
  if (first < 0 || count < 0 || first + count > count_)
    ST_THROW(ValueError, "token file " << path_ << ": tokens [" << first << ", " << first + count << ") out of range [0, "
                                       << count_ << ")");
  std::vector<uint32_t> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out[static_cast<size_t>(i)] = at(first + i);
  return out;
}

int64_t TokenData::num_sequences(int64_t T) const {
  if (T < 1) ST_THROW(ValueError, "token file " << path_ << ": sequence length " << T << " < 1");
  return count_ > 0 ? (count_ - 1) / T : 0;
}

uint32_t TokenData::max_token() const {
  uint32_t m = 0;
  for (int64_t i = 0; i < count_; ++i) m = std::max(m, at(i));
  return m;
}

TokenBatch TokenData::read(int64_t first, int64_t count, int64_t T) const {
  const int64_t n_seq = num_sequences(T);
  if (n_seq < 1)
    ST_TOKEN_ERROR(path_, count_ << " tokens are too few for one sequence of length " << T << " (needs " << T + 1 << ")");
  if (first < 0 || count < 0) ST_THROW(ValueError, "token file " << path_ << ": bad sequence range first " << first << " count " << count);
  TokenBatch b{Tensor::empty({count, T}, DType::i64), Tensor::empty({count, T}, DType::i64)};
  int64_t* x = b.inputs.data<int64_t>();   // (count, T)
  int64_t* y = b.targets.data<int64_t>();  // (count, T)
  for (int64_t r = 0; r < count; ++r)
    copy_sequence(order_.index(first + r, n_seq) * T, T, x + r * T, y + r * T);  // its T + 1 tokens from here
  return b;
}

void TokenData::copy_sequence(int64_t first, int64_t T, int64_t* x, int64_t* y) const {
  for (int64_t t = 0; t < T; ++t) {
    x[t] = at(first + t);
    y[t] = at(first + t + 1);
  }
}

TokenBatch TokenSource::sequences(int64_t step, int64_t global_batch, int64_t first_seq, int64_t count, int64_t T) const {
  if (step < 0 || global_batch < 1 || first_seq < 0 || count < 0 || first_seq + count > global_batch)
    ST_THROW(ValueError, "token file " << path() << ": sequences [" << first_seq << ", " << first_seq + count
                                       << ") of step " << step << " with global batch " << global_batch << " are out of range");
  return read(step * global_batch + first_seq, count, T);
}

namespace {

static_assert(std::endian::native == std::endian::little, "token files are written in the machine's byte order");

// The header, then `n` tokens of `width` bytes at `data` (little-endian on every machine this
// builds for), atomically.
void write_tokens(const std::string& path, int32_t version, const void* data, size_t n, size_t width) {
  if (n > static_cast<size_t>(INT32_MAX)) ST_TOKEN_ERROR(path, n << " tokens exceed the format's int32 count");
  int32_t hdr[kTokenHeaderInts] = {};
  hdr[0] = kTokenMagic;
  hdr[1] = version;
  hdr[2] = static_cast<int32_t>(n);
  const std::string tmp = temp_name_for(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) ST_TOKEN_ERROR(path, "cannot create " << tmp << ": " << std::strerror(errno));
  auto put = [&](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::write(fd, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        ST_TOKEN_ERROR(path, "write failed: " << std::strerror(err));
      }
      c += w;
      n -= static_cast<size_t>(w);
    }
  };
  put(hdr, sizeof(hdr));
  put(data, n * width);
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    ST_TOKEN_ERROR(path, "fsync/close failed: " << std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    ST_TOKEN_ERROR(path, "rename from " << tmp << " failed: " << std::strerror(err));
  }
}

}  // namespace

void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens) {
  write_tokens(path, kTokenVersion, tokens.data(), tokens.size(), sizeof(uint16_t));
}

void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens) {
  if (std::all_of(tokens.begin(), tokens.end(), [](uint32_t t) { return t < 65536; })) {
    const std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
    return write_token_file(path, narrow);
  }
  write_tokens(path, kTokenVersion32, tokens.data(), tokens.size(), sizeof(uint32_t));
}

void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens, int32_t version) {
  if (version == kTokenVersion32) return write_tokens(path, kTokenVersion32, tokens.data(), tokens.size(), sizeof(uint32_t));
  if (version != kTokenVersion) ST_TOKEN_ERROR(path, "unknown version " << version);
  for (uint32_t t : tokens)
    if (t >= 65536) ST_TOKEN_ERROR(path, "id " << t << " does not fit version 1's uint16 tokens");
  write_token_file(path, std::vector<uint16_t>(tokens.begin(), tokens.end()));
}

}  // namespace st::runtime
