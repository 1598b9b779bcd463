// A 64-bit checksum of a byte buffer, to catch a checkpoint that changed on disk (a flipped bit,
// a truncated or overwritten tail) before its numbers are trained on. Not cryptographic: it
// detects accidents, not tampering.
//
// Four lanes of 8-byte little-endian words, word i into lane i mod 4: lane = (lane ^ w) · K,
// then lane ^= lane >> 29. Both steps are bijections of the lane, so two buffers of the same
// length that differ in one word always differ in that lane's state, and the final mix (the
// length and the lanes through splitmix64's finalizer) keeps it; a random change is missed with
// probability ≈ 2⁻⁶⁴. The tail (n mod 8 bytes) is one zero-padded word. ~2 bytes per cycle on
// one core, so checking a tensor costs much less than reading it from disk.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace st::runtime {

uint64_t checksum64(const void* data, size_t bytes);

// 16 lower-case hex digits, and back (false when `hex` is not 16 hex digits).
std::string checksum_hex(uint64_t c);
bool parse_checksum_hex(const std::string& hex, uint64_t& out);

}  // namespace st::runtime
