// StateSharding: which part of a checkpoint this rank writes, so that across the job every
// tensor is written exactly once, and the collective write of those parts. A checkpoint holds
// full tensors by name (so a run resumes under any layout; reading back is per rank by name,
// runtime/parallel/state_io.h), split over files in Hugging Face's sharded layout: each rank
// that writes anything writes one file of its own, <base>-0000k-of-0000n.safetensors (or
// <base>.safetensors when a single rank writes everything), and rank 0 indexes them
// (runtime/io/safetensors_index.h).
//
// Who writes a tensor: a tensor held whole by several ranks by one of them — a DP replica's
// copy by DP rank 0 (ZeRO: the owner of its optimizer shard), a tied weight by its first stage,
// a tensor replicated over a tp group by tp rank 0 (the caller's `elsewhere` predicate names
// the rest); a tensor split over a tp group is assembled inside the group one tensor at a time
// (each tp rank broadcasts its shard in turn) by the tp rank whose turn it is (split tensors
// round-robin over the group), so no rank holds more than its share plus one full tensor.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/common/named_tensors.h"
#include "runtime/common/shard_spec.h"
#include "runtime/io/safetensors.h"
#include "tensor/device_ops.h"

namespace st::cuda {
class PinnedBuffer;
}

namespace st::runtime {

struct StateSharding {
  std::shared_ptr<comm::Communicator> world;  // every rank of the job; null: one process
  std::shared_ptr<comm::Communicator> tp;     // this rank's tp group; null or one rank: none
  bool writes = true;  // false on a DP replica whose tensors another DP rank writes (dp > 0, no ZeRO)
  int rank() const { return world ? world->rank() : 0; }
};

// True for a checkpoint key that another rank writes (see above).
using WrittenElsewhere = std::function<bool(const std::string& key)>;

// Collective over sharding.world and the tp groups: writes this rank's share of `state` (keys →
// this rank's tensors: whole, or its tp shards as `rule` splits them) into DIR, each file
// fsynced, metadata in each header. Returns every writing rank's file name (relative to DIR, in
// rank order), the same list on every rank.
std::vector<std::string> write_parts(const std::string& dir, const std::string& base, const NamedTensors& state,
                                     const ShardRule& rule, const WrittenElsewhere& elsewhere,
                                     const StateSharding& sharding,
                                     const std::map<std::string, std::string>& metadata = {});

// Asynchronous saving (docs/design.md, "--async-checkpoint 1"): the same share, copied into host
// memory by snapshot_parts on the calling thread (the collectives: the file names' all-gather, the
// tp groups' assemblies), then written by write_snapshot, which makes no collective call and
// touches no tensor, so a background thread may run it while training goes on.

// Host memory a snapshot is copied into, kept from one save to the next (the sizes repeat; grown
// when short). CPU tensors: plain host memory, a memcpy at once. CUDA tensors: page-locked
// (st::cuda::PinnedBuffer), reached through one device block: flush() packs every tensor given
// to copy_in into it with one kernel (tensor/device_ops.h's pack_bytes, on the current stream after
// the step that made them: the next step may change the originals); wait() — called by the
// checkpoint's writer thread — sends the block to the host piece by piece on the pinned block's
// own copy stream (PinnedBuffer::download_on_wait), overlapping the steps that follow without
// queueing the whole block ahead of their own copies. The
// device block is held until release(). Per save: two launches and a few CUDA calls, whatever the
// number of tensors (a copy and a download per tensor took ~10 ms for GPT-2 124M's ~450). A CPU
// tensor among CUDA ones (the optimizer's step count) is kept aside and written over the block by
// wait(), after the download (which covers the whole block, gaps included); rewrite() replaces it
// (a counter known only after the snapshot was taken, runtime/train/trainer.h's snapshot_early).
// CUDA tensors inside the block given to download_directly (the optimizer's snapshot copies,
// runtime/optim/optimizer.h: nothing writes them until the download has run) are not packed: wait()
// downloads each from where it is, and the device block holds only the others, in runs (the
// packed tensors between two direct ones), each run downloaded as one piece.
class HostStaging {
 public:
  HostStaging();
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  void reserve(size_t bytes, bool pinned);  // at least `bytes`; drops what was held (nothing in flight)
  void copy_in(const Tensor& t, size_t offset);  // t's bytes → [offset, offset + nbytes); CUDA: at flush()
  void flush();  // the CUDA tensors given to copy_in on their way (nothing for CPU ones)
  // copy_in's CUDA tensors lying inside `block` are downloaded from there (undefined: none)
  void download_directly(const Tensor& block) { direct_block_ = block; }
  void wait();  // until every copy_in is in the block (CUDA: runs the download; any thread)
  void release();  // wait(), then the device block goes (the thread that made it)
  // The bytes of the CPU tensor given to copy_in at `offset` become t's (same size; before wait()).
  void rewrite(size_t offset, const Tensor& t);
  const unsigned char* data() const;
  size_t bytes() const { return bytes_; }
  size_t device_bytes() const { return device_.defined() ? device_.nbytes() : 0; }  // the packed copy's (tests)

 private:
  std::vector<Tensor> queued_;              // CUDA tensors given to copy_in since the last flush
  std::vector<cuda::BytePiece> pieces_;     // their bytes → their offsets in the host block
  Tensor direct_block_;                     // download_directly's
  std::vector<cuda::BytePiece> direct_;     // copy_in's tensors inside it → their offsets in the host block
  std::vector<Tensor> direct_held_;         // those tensors, until release()
  struct HostPiece {
    size_t offset;
    std::vector<unsigned char> bytes;
  };
  std::vector<HostPiece> host_pieces_;      // CPU tensors of a pinned block: written by wait()
  Tensor device_;  // the device block being downloaded (destroyed after pinned_)
  std::unique_ptr<cuda::PinnedBuffer> pinned_;
  std::unique_ptr<unsigned char[]> plain_;
  size_t bytes_ = 0;
};

// One part's share of this rank, in host memory: each tensor at a multiple of kHostAlign bytes.
constexpr size_t kHostAlign = 16;
struct PartSnapshot {
  std::vector<std::string> files;  // every writing rank's file (relative to the directory), as write_parts returns
  std::string file;                // this rank's; "" when it writes nothing
  std::vector<SafetensorsWriter::Spec> specs;  // its tensors, in the file's order
  std::vector<size_t> offsets;     // where each one's bytes start in `host` (multiples of kHostAlign)
  std::map<std::string, std::string> metadata;
  std::shared_ptr<HostStaging> host;
};

// Collective exactly as write_parts (the same calls, in the same order): this rank's share of
// `state` copied into `host` (reserved here). Nothing is written.
PartSnapshot snapshot_parts(const std::string& base, const NamedTensors& state, const ShardRule& rule,
                            const WrittenElsewhere& elsewhere, const StateSharding& sharding,
                            std::shared_ptr<HostStaging> host, const std::map<std::string, std::string>& metadata = {});
// Writes and fsyncs this rank's file of `snap` into DIR (nothing when it writes none); waits for
// the host copies first. No collective, no tensor: safe on a background thread.
void write_snapshot(const std::string& dir, const PartSnapshot& snap);
// The snapshot's bytes of `name` become t's (a CPU tensor of the spec's dtype and shape); nothing
// when this rank does not write `name`. Before write_snapshot.
void rewrite_snapshot_entry(const PartSnapshot& snap, const std::string& name, const Tensor& t);

}  // namespace st::runtime
