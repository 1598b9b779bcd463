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

uint64_t checksum64(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t lane[4] = {0x243f6a8885a308d3ull, 0x13198a2e03707344ull, 0xa4093822299f31d0ull, 0x082efa98ec4e6c89ull};
  size_t i = 0;
  for (; i + 32 <= bytes; i += 32)
    for (int k = 0; k < 4; ++k) lane[k] = round(lane[k], load_le(p + i + 8 * k, 8));
  for (int k = 0; i < bytes; i += 8, ++k) lane[k] = round(lane[k], load_le(p + i, bytes - i < 8 ? bytes - i : 8));
  uint64_t h = finalize(bytes);
  for (uint64_t l : lane) h = finalize(h ^ l);
  return h;
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
