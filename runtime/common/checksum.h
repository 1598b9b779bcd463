// A 64-bit checksum of a byte buffer, to catch a checkpoint that changed on disk (a flipped bit,
// a truncated or overwritten tail) before its numbers are trained on. Not cryptographic: it
// detects accidents, not tampering.
//
// Four lanes of 8-byte little-endian words, word i into lane i mod 4: lane = (lane ^ w) · K,
// then lane ^= lane >> 29. Both steps are bijections of the lane, so two buffers of the same
// length that differ in one word always differ in that lane's state, and the final mix (the
// length and the lanes through splitmix64's finalizer) keeps it; a random change is missed with
// probability ≈ 2⁻⁶⁴. The tail (n mod 32 bytes) goes in as zero-padded words, lane 0 first.
// ~2 bytes per cycle on one core, so checking a tensor costs much less than reading it from disk.
//
// Checksum64 computes the same value over a buffer fed in pieces of any sizes (a chunk read in
// several positioned reads), holding at most 31 bytes between calls.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace st::runtime {

uint64_t checksum64(const void* data, size_t bytes);

class Checksum64 {
 public:
  Checksum64();
  void update(const void* data, size_t bytes);
  uint64_t digest() const;  // of everything fed so far (the state is kept: update may go on)

 private:
  uint64_t lane_[4];
  unsigned char pending_[32];
  size_t npending_ = 0;
  uint64_t total_ = 0;
};

// 16 lower-case hex digits, and back (false when `hex` is not 16 hex digits).
std::string checksum_hex(uint64_t c);
bool parse_checksum_hex(const std::string& hex, uint64_t& out);

}  // namespace st::runtime
