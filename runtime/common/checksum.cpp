// checksum64 (see the header).
#include "runtime/common/checksum.h"

#include <cstring>

namespace st::runtime {
namespace {

constexpr uint64_t kMul = 0x9fb21c651e98df25ull;  // odd: multiplying by it is a bijection mod 2^64

uint64_t finalize(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t round(uint64_t lane, uint64_t w) {
  lane = (lane ^ w) * kMul;
  return lane ^ (lane >> 29);
}

uint64_t load_le(const unsigned char* p, size_t n) {  // n ≤ 8 bytes, zero-padded
  uint64_t w = 0;
  for (size_t i = 0; i < n; ++i) w |= static_cast<uint64_t>(p[i]) << (8 * i);
  return w;
}

}  // namespace

Checksum64::Checksum64() : lane_{0x243f6a8885a308d3ull, 0x13198a2e03707344ull, 0xa4093822299f31d0ull, 0x082efa98ec4e6c89ull} {}

void Checksum64::update(const void* data, size_t bytes) {
  if (bytes == 0) return;  // (data may be null then)
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += bytes;
  if (npending_ > 0) {  // complete the pending block first
    const size_t take = bytes < 32 - npending_ ? bytes : 32 - npending_;
    std::memcpy(pending_ + npending_, p, take);
    npending_ += take;
    p += take;
    bytes -= take;
    if (npending_ < 32) return;
    for (int k = 0; k < 4; ++k) lane_[k] = round(lane_[k], load_le(pending_ + 8 * k, 8));
    npending_ = 0;
  }
  for (; bytes >= 32; p += 32, bytes -= 32)
    for (int k = 0; k < 4; ++k) lane_[k] = round(lane_[k], load_le(p + 8 * k, 8));
  if (bytes > 0) std::memcpy(pending_, p, bytes);
  npending_ = bytes;
}

uint64_t Checksum64::digest() const {
  uint64_t lane[4] = {lane_[0], lane_[1], lane_[2], lane_[3]};
  for (size_t i = 0, k = 0; i < npending_; i += 8, ++k)  // the tail: zero-padded words
    lane[k] = round(lane[k], load_le(pending_ + i, npending_ - i < 8 ? npending_ - i : 8));
  uint64_t h = finalize(total_);
  for (uint64_t l : lane) h = finalize(h ^ l);
  return h;
}

uint64_t checksum64(const void* data, size_t bytes) {
  Checksum64 c;
  c.update(data, bytes);
  return c.digest();
}

std::string checksum_hex(uint64_t c) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, c >>= 4) s[static_cast<size_t>(i)] = digits[c & 15];
  return s;
}

bool parse_checksum_hex(const std::string& hex, uint64_t& out) {
  if (hex.size() != 16) return false;
  uint64_t v = 0;
  for (char ch : hex) {
    int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
    if (d < 0) return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  out = v;
  return true;
}

}  // namespace st::runtime
