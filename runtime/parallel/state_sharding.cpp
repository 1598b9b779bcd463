// Writing a checkpoint's parts: a plan (what this rank writes, in order), one all-gather of the
// per-rank counts (file names), then a streaming write with the tp groups' assemblies in turn —
// or, for an asynchronous save, the same plan and assemblies copied into host memory
// (snapshot_parts) and written later without collectives (write_snapshot).
#include "runtime/parallel/state_sharding.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "runtime/io/safetensors.h"
#include "runtime/io/safetensors_index.h"
#include "runtime/observe/trace.h"
#include "tensor/autograd.h"
#include "tensor/pinned.h"

namespace st::runtime {
namespace {

// One entry of `state` as this rank sees it.
struct Item {
  std::string name;
  Tensor local;
  ShardSpec spec;
  Shape full;          // the full tensor's shape
  bool split = false;  // assembled over the tp group
  bool writes = false; // this rank writes it (a split one: it is this rank's turn)
};

Shape full_shape(const Shape& local, const ShardSpec& s, int tp) {
  if (s.kind == ShardSpec::Kind::replicated || local.empty()) return local;
  Shape full = local;
  const int64_t d = wrap_dim(s.dim, static_cast<int64_t>(local.size()), "checkpoint");
  full[static_cast<size_t>(d)] = s.pad_to_tp ? s.full_size : local[static_cast<size_t>(d)] * tp;
  return full;
}

// The full tensor of a split item on its writer; every tp rank takes part (one broadcast per rank).
Tensor assemble(const Item& it, comm::Communicator& tp) {
  Tensor full;
  if (it.writes) full = Tensor::empty(it.full, it.local.dtype(), it.local.device());
  for (int r = 0; r < tp.size(); ++r) {
    Tensor buf = r == tp.rank() ? it.local.detach().contiguous() : it.local.empty_like();  // (local shape)
    tp.broadcast(buf, r)->wait();
    if (!it.writes) continue;
    const ShardSlice slice = shard_slice(it.spec, it.full, tp.size(), r);
    int64_t at = 0;
    for (const DimRange& range : slice.ranges) {
      full.narrow(slice.dim, range.start, range.length).copy_(buf.narrow(slice.dim, at, range.length));
      at += range.length;
    }
  }
  return full;
}

// What this rank writes of `state`, in order, and the file names (one all-gather of the counts).
struct Plan {
  std::vector<Item> items;
  std::vector<SafetensorsWriter::Spec> specs;  // the items this rank writes
  std::vector<std::string> files;              // every writing rank's
  int mine = -1;                               // this rank's index into files; −1: none
};

Plan make_plan(const std::string& base, const NamedTensors& state, const ShardRule& rule,
               const WrittenElsewhere& elsewhere, const StateSharding& sharding) {
  Plan p;
  const int tp = sharding.tp ? sharding.tp->size() : 1;
  int turn = 0;  // split tensors round-robin over the tp group
  for (auto& [name, t] : state) {
    if (!sharding.writes || (elsewhere && elsewhere(name))) continue;
    Item it{name, t, rule && tp > 1 ? rule(name) : ShardSpec::replicate(), {}, false, true};
    it.split = it.spec.kind == ShardSpec::Kind::split && !t.shape().empty();
    it.full = it.split ? full_shape(t.shape(), it.spec, tp) : t.shape();
    if (it.split) it.writes = turn++ % tp == sharding.tp->rank();
    p.items.push_back(std::move(it));
  }
  for (const Item& it : p.items)
    if (it.writes) p.specs.push_back({it.name, it.local.dtype(), it.full});

  // every rank's count → the file names
  const int world = sharding.world ? sharding.world->size() : 1;
  std::vector<int64_t> counts{static_cast<int64_t>(p.specs.size())};
  if (world > 1) {
    Tensor all = Tensor::empty({world}, DType::i64);  // (world)
    sharding.world->all_gather(Tensor::from_vector(counts, {1}), all)->wait();
    const int64_t* c = all.data<int64_t>();
    counts.assign(c, c + world);
  }
  int n = 0;
  for (int r = 0; r < world; ++r)
    if (counts[static_cast<size_t>(r)] > 0) {
      if (r == sharding.rank()) p.mine = n;
      ++n;
    }
  for (int k = 0; k < n; ++k) p.files.push_back(n == 1 ? base + ".safetensors" : shard_file_name(base, k + 1, n));
  return p;
}

// `offset` rounded up to the host block's alignment (kHostAlign)
size_t host_aligned(size_t offset) { return (offset + kHostAlign - 1) / kHostAlign * kHostAlign; }

}  // namespace

std::vector<std::string> write_parts(const std::string& dir, const std::string& base, const NamedTensors& state,
                                     const ShardRule& rule, const WrittenElsewhere& elsewhere,
                                     const StateSharding& sharding, const std::map<std::string, std::string>& metadata) {
  NoGradGuard ng;
  const Plan plan = make_plan(base, state, rule, elsewhere, sharding);
  std::unique_ptr<SafetensorsWriter> out;
  if (plan.mine >= 0)
    out = std::make_unique<SafetensorsWriter>(
        (std::filesystem::path(dir) / plan.files[static_cast<size_t>(plan.mine)]).string(), plan.specs, metadata);
  for (const Item& it : plan.items) {
    const Tensor t = it.split ? assemble(it, *sharding.tp) : it.local;
    if (it.writes) out->write(t);
  }
  if (out) out->finish();
  return plan.files;
}

HostStaging::HostStaging() = default;
HostStaging::~HostStaging() = default;

void HostStaging::reserve(size_t bytes, bool pinned) {
  release();
  const size_t want = std::max<size_t>(bytes, 1);
  if (want <= bytes_ && (pinned == (pinned_ != nullptr))) return;
  pinned_.reset();
  plain_.reset();
  if (pinned)
    pinned_ = std::make_unique<cuda::PinnedBuffer>(want);
  else
    plain_.reset(new unsigned char[want]);  // uninitialised: every byte read is copied in first
  bytes_ = want;
}

void HostStaging::copy_in(const Tensor& t, size_t offset) {
  const Tensor c = t.detach().contiguous();
  ST_CHECK(offset + c.nbytes() <= bytes_, Error, "HostStaging: " << c.nbytes() << " bytes at " << offset
                                                     << " past the block's " << bytes_);
  if (c.nbytes() == 0) return;
  if (c.is_cuda()) {
    ST_CHECK(pinned_ != nullptr, Error, "HostStaging: a CUDA tensor into plain host memory");
    const auto* p = static_cast<const unsigned char*>(c.data_ptr());
    const auto* b = direct_block_.defined() ? static_cast<const unsigned char*>(direct_block_.data_ptr()) : nullptr;
    if (b && c.device() == direct_block_.device() && p >= b && p + c.nbytes() <= b + direct_block_.nbytes()) {
      direct_.push_back({c.data_ptr(), offset, c.nbytes()});
      direct_held_.push_back(c);
      return;
    }
    pieces_.push_back({c.data_ptr(), offset, c.nbytes()});
    queued_.push_back(c);  // alive until packed
  } else if (pinned_) {  // the download covers the whole block: written after it (wait())
    const auto* b = static_cast<const unsigned char*>(c.data_ptr());
    host_pieces_.push_back({offset, std::vector<unsigned char>(b, b + c.nbytes())});
  } else {
    std::memcpy(const_cast<unsigned char*>(data()) + offset, c.data_ptr(), c.nbytes());
  }
}

void HostStaging::rewrite(size_t offset, const Tensor& t) {
  const Tensor c = t.detach().contiguous();
  ST_CHECK(!c.is_cuda(), Error, "HostStaging::rewrite: a CPU tensor, not " << c.describe());
  ST_CHECK(offset + c.nbytes() <= bytes_, Error, "HostStaging: " << c.nbytes() << " bytes at " << offset
                                                     << " past the block's " << bytes_);
  const auto* b = static_cast<const unsigned char*>(c.data_ptr());
  if (!pinned_) {
    std::memcpy(const_cast<unsigned char*>(data()) + offset, b, c.nbytes());
    return;
  }
  for (HostPiece& h : host_pieces_)
    if (h.offset == offset) {
      ST_CHECK(h.bytes.size() == c.nbytes(), Error, "HostStaging::rewrite: " << c.nbytes() << " bytes at " << offset
                                                        << " over a tensor of " << h.bytes.size());
      std::memcpy(h.bytes.data(), b, c.nbytes());
      return;
    }
  ST_THROW(Error, "HostStaging::rewrite: no CPU tensor was copied in at " << offset);
}

void HostStaging::flush() {
  if (pieces_.empty() && direct_.empty()) return;
  trace::Scope ts("checkpoint pack", "optimizer");
  if (!pieces_.empty()) {
    ST_CHECK(!device_.defined(), Error, "HostStaging: flush() while the previous device block is held");
    // The packed pieces in runs — those, by offset, with no direct piece between them — laid out
    // in the device block as in the host block, run after run (each at a 16-byte boundary), so
    // that each run downloads as one piece and the block holds no room for the direct ones.
    auto by_offset = [](const cuda::BytePiece& a, const cuda::BytePiece& b) { return a.offset < b.offset; };
    std::sort(pieces_.begin(), pieces_.end(), by_offset);
    std::sort(direct_.begin(), direct_.end(), by_offset);
    struct Run {
      size_t host, device, bytes;
    };
    std::vector<Run> runs;
    size_t di = 0, device_end = 0;
    for (cuda::BytePiece& p : pieces_) {
      bool split = runs.empty();
      while (di < direct_.size() && direct_[di].offset < p.offset) split = true, ++di;  // a direct piece before p
      if (split) runs.push_back({p.offset, host_aligned(device_end), 0});
      Run& r = runs.back();
      r.bytes = std::max(r.bytes, p.offset + p.bytes - r.host);
      p.offset = r.device + (p.offset - r.host);  // now the device block's
      device_end = std::max(device_end, r.device + r.bytes);
    }
    // (ceil(device_end / 8)) i64 words: the caching allocator's block, 256-byte aligned
    device_ = Tensor::empty({static_cast<int64_t>((device_end + 7) / 8)}, DType::i64, Device::cuda);
    cuda::pack_bytes(device_.data_ptr(), pieces_);
    for (const Run& r : runs)  // issued piece by piece by wait(): the writer thread
      pinned_->download_on_wait(static_cast<const unsigned char*>(device_.data_ptr()) + r.device, r.bytes, r.host);
  }
  for (const cuda::BytePiece& d : direct_) pinned_->download_on_wait(d.src, d.bytes, d.offset);
  pieces_.clear();
  direct_.clear();
  queued_.clear();  // stream-ordered: their memory is reused only after the pack ran
}

void HostStaging::wait() {
  if (!pinned_) return;
  pinned_->wait();
  unsigned char* block = static_cast<unsigned char*>(pinned_->data());
  for (const HostPiece& h : host_pieces_) std::memcpy(block + h.offset, h.bytes.data(), h.bytes.size());
}

void HostStaging::release() {
  wait();
  device_ = Tensor();
  pieces_.clear();
  queued_.clear();
  direct_.clear();
  direct_held_.clear();
  host_pieces_.clear();
}

const unsigned char* HostStaging::data() const {
  return pinned_ ? static_cast<const unsigned char*>(pinned_->data()) : plain_.get();
}

PartSnapshot snapshot_parts(const std::string& base, const NamedTensors& state, const ShardRule& rule,
                            const WrittenElsewhere& elsewhere, const StateSharding& sharding,
                            std::shared_ptr<HostStaging> host, const std::map<std::string, std::string>& metadata) {
  NoGradGuard ng;
  const Plan plan = make_plan(base, state, rule, elsewhere, sharding);
  PartSnapshot snap;
  snap.files = plan.files;
  if (plan.mine >= 0) snap.file = plan.files[static_cast<size_t>(plan.mine)];
  snap.specs = plan.specs;
  snap.metadata = metadata;
  snap.host = std::move(host);
  size_t total = 0;
  bool on_cuda = false;
  for (const SafetensorsWriter::Spec& s : plan.specs) {
    // every tensor at a 16-byte boundary of the block (the file is written tensor by tensor, so
    // the gaps never reach it): the device pack then moves 16-byte words wherever its source is
    // aligned, where the optimizer part's 8-byte step count, first, put every moment 8 bytes off
    // and the pack fell to 4-byte words (~2 ms a save for GPT-2 124M on an H100, against ~1 ms)
    total = host_aligned(total);
    snap.offsets.push_back(total);
    total += static_cast<size_t>(shape_numel(s.shape)) * dtype_size(s.dtype);
  }
  for (const Item& it : plan.items) on_cuda = on_cuda || it.local.is_cuda();
  snap.host->reserve(total, on_cuda);
  size_t k = 0;
  for (const Item& it : plan.items) {
    const Tensor t = it.split ? assemble(it, *sharding.tp) : it.local;  // every tp rank takes part
    if (it.writes) snap.host->copy_in(t, snap.offsets[k++]);
  }
  snap.host->flush();
  return snap;
}

void rewrite_snapshot_entry(const PartSnapshot& snap, const std::string& name, const Tensor& t) {
  for (size_t k = 0; k < snap.specs.size(); ++k) {
    const SafetensorsWriter::Spec& s = snap.specs[k];
    if (s.name != name) continue;
    ST_CHECK(t.dtype() == s.dtype && t.shape() == s.shape, Error,
             "checkpoint snapshot: '" << name << "' is " << dtype_name(s.dtype) << " " << shape_str(s.shape)
                                      << ", rewritten with " << t.describe());
    snap.host->rewrite(snap.offsets[k], t);
    return;
  }
}

void write_snapshot(const std::string& dir, const PartSnapshot& snap) {
  if (snap.file.empty()) return;
  SafetensorsWriter out((std::filesystem::path(dir) / snap.file).string(), snap.specs, snap.metadata);
  snap.host->wait();
  const unsigned char* base = snap.host->data();
  for (size_t k = 0; k < snap.specs.size(); ++k) {
    const SafetensorsWriter::Spec& s = snap.specs[k];
    out.write_bytes(base + snap.offsets[k], static_cast<size_t>(shape_numel(s.shape)) * dtype_size(s.dtype));
  }
  out.finish();
}

}  // namespace st::runtime
