// The run's fingerprint: every option that must be the same on every rank of a job (model and
// its sizes, layout, batch, optimizer and its hyper-parameters, seed, numerics, data, init and
// checkpoint), by name, as printable values. Ranks started with different options (mpirun's
// `-np 1 … --lr 0.001 : -np 1 … --lr 0.002`) would otherwise train silently apart, or meet in a
// collective of another shape; run_parallel_training checks the fingerprint right after the world
// communicator exists, before any other collective.
//
// The exchange has a fixed size whatever the options, so it cannot itself mismatch: one
// all_gather of kFingerprintSlots 64-bit hashes (one per key, FNV-1a of "key=value"; the last
// slot hashes the list of key names, so two different builds are told apart), then, when a key
// differs, one all_gather of its printable value in kFingerprintValueBytes per rank. Every rank
// then throws the same ValueError (launch/ prints it as the job's one line):
//   ranks disagree on lr: rank 0 0.001, rank 1 0.002 (every rank must be started with the same options)
// Options only rank 0 reads (metrics, log-every, progress, keep-checkpoints), the deadline
// (timeout-s) and where a deadline's flight recorder goes (flight-recorder-dump) may differ. The
// files a run reads (--data, --val-data, --init-from's weights) are compared by content too
// (file_identity): the line then says the ranks read different files.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "runtime/data/data_identity.h"
#include "runtime/setup/train_config.h"

namespace st::runtime {

constexpr int kFingerprintSlots = 80;        // hashes per rank (keys + 1 for the key list; room to grow)
constexpr int kFingerprintValueBytes = 256;  // a printable value per rank, NUL-padded

using Fingerprint = std::vector<std::pair<std::string, std::string>>;  // (key, printable value)

// The keys in a fixed order; "data identity" is file_identity(cfg.data) for one token file (for a
// corpus or mixture: its file count, bytes and a checksum of each file's identity),
// "val-data identity" that of cfg.val_data, "init-from identity" that of cfg.init_from's weights (model.safetensors, or
// the sharded layout's index).
Fingerprint run_fingerprint(const TrainConfig& cfg);

// file_identity(path): runtime/data/data_identity.h (what tells two files apart cheaply).

// FNV-1a 64 of `text`.
uint64_t fingerprint_hash(const std::string& text);

// The one-line cause for `key`, given every rank's value (index = rank): equal values grouped
// ("ranks 0,2 0.001, rank 1 0.002").
std::string describe_disagreement(const std::string& key, const std::vector<std::string>& values);

// Collective over `world` (every rank, before any other collective): throws ValueError naming
// the first key that differs and every rank's value for it (other differing keys listed after).
void check_ranks_agree(const Fingerprint& mine, comm::Communicator& world);

}  // namespace st::runtime
