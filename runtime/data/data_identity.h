// What tells one run's data from another's, cheaply, even at 10 GB: the data layer's answer for
// each form of corpus it reads. A checkpoint records it (state.json "data" → "identity") and a
// resume compares it with the data it is given (runtime/train/trainer.cpp: other data is refused
// unless --data-changed 1); the run's fingerprint compares it between ranks
// (runtime/setup/run_fingerprint.h). A form of corpus other than one token file (a directory, a
// glob) supplies its own text here: any string that changes when the tokens do.
#pragma once
#include <string>

namespace st::runtime {

// One file: "<size> bytes, sample <checksum64>" of the first 1 KiB (a token file's header) and
// 64 blocks of 4 KiB spread evenly to the end (the whole file when it is smaller: 257 KiB read at
// most); "none" for "", "missing" when unreadable.
std::string file_identity(const std::string& path);

// The identity of the training data `data` (--data, as the run reads it).
std::string data_identity(const std::string& data);

}  // namespace st::runtime
