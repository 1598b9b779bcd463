// What tells one run's data from another's, cheaply, even at 10 GB: the data layer's answer for
// each form of corpus it reads. A checkpoint records it (state.json "data" → "identity") and a
// resume compares it with the data it is given (runtime/train/trainer.cpp: other data is refused
// unless --data-changed 1); the run's fingerprint compares it between ranks
// (runtime/setup/run_fingerprint.h).
#pragma once
#include <string>

namespace st::runtime {

// One file: "<size> bytes, sample <checksum64>" of the first 1 KiB (a token file's header) and
// 64 blocks of 4 KiB spread evenly to the end (the whole file when it is smaller: 257 KiB read at
// most); "none" for "", "missing" when unreadable.
std::string file_identity(const std::string& path);

// The identity of a --data / --val-data spec (runtime/data/data_spec.h): file_identity of its one
// token file, else "<n> files, <bytes> bytes, sample <checksum of each part's place and weight and
// each file's identity>" (within the 256 bytes a fingerprint value may hold); "none" for "",
// "missing" for a spec that does not resolve.
std::string data_identity(const std::string& spec);

}  // namespace st::runtime
