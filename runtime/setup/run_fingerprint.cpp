// The run's fingerprint and its fixed-size exchange (see the header).
#include "runtime/setup/run_fingerprint.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/setup/model_registry.h"
#include "runtime/common/checksum.h"
#include "runtime/data/data_identity.h"

namespace st::runtime {
namespace {

std::string num(double v) {  // the shortest text that reads back as v
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}
std::string num(int64_t v) { return std::to_string(v); }
std::string flag(bool v) { return v ? "1" : "0"; }
std::string path_or_none(const std::string& p) { return p.empty() ? "none" : p; }

}  // namespace

namespace {

// The weights file of an --init-from directory: one file, or the sharded layout's index.
std::string init_from_identity(const std::string& dir) {
  if (dir.empty()) return "none";
  const std::string one = dir + "/model.safetensors";
  std::error_code ec;
  return file_identity(std::filesystem::exists(one, ec) ? one : dir + "/model.safetensors.index.json");
}

// The world's device for a collective: NCCL communicators take CUDA tensors only.
Device comm_device(const comm::Communicator& world) {
  return std::string(world.backend()) == "nccl" ? Device::cuda : Device::cpu;
}

// all_gather of `mine` (n i64 per rank) → every rank's n values, on the host.
std::vector<int64_t> gather_i64(comm::Communicator& world, const std::vector<int64_t>& mine) {
  const int64_t n = static_cast<int64_t>(mine.size());
  const Device dev = comm_device(world);
  Tensor in = Tensor::from_vector(mine, {n}).to(dev);                 // (n)
  Tensor out = Tensor::zeros({world.size() * n}, DType::i64, dev);    // (size · n)
  world.all_gather(in, out)->wait();
  Tensor host = out.to(Device::cpu);
  const int64_t* p = host.data<int64_t>();
  return std::vector<int64_t>(p, p + world.size() * n);
}

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream o;
  o << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) o << (i ? "," : "") << ranks[i];
  return o.str();
}

}  // namespace

Fingerprint run_fingerprint(const TrainConfig& c) {
  return {
      // model
      {"model", model_family(c)},
      {"layers", num(c.layers)},
      {"d-model", num(c.d_model)},
      {"heads", num(c.heads)},
      {"kv-heads", num(c.kv_heads)},
      {"ffn", num(c.ffn)},
      {"rope-theta", num(c.rope_theta)},
      {"tie-embeddings", num(c.tie_embeddings)},
      {"vocab", num(c.vocab)},
      {"seq-len", num(c.seq_len)},
      {"dropout", num(c.dropout)},
      {"init-from", path_or_none(c.init_from)},
      {"init-from identity", init_from_identity(c.init_from)},
      // layout
      {"dp", num(c.dp)},
      {"tp", num(c.tp)},
      {"cp", num(c.cp)},
      {"sequence-parallel", num(c.sequence_parallel)},
      {"pp", num(c.pp)},
      {"schedule", to_string(c.schedule)},
      {"virtual-stages", num(c.virtual_stages)},
      {"partition", to_string(c.partition)},
      {"comm", c.comm},
      // batch
      {"micro-batch", num(c.micro_batch)},
      {"grad-accum", num(c.grad_accum)},
      {"global-batch", num(c.global_batch)},
      // numerics
      {"precision", to_string(c.precision)},
      {"fp8-scaling", to_string(c.fp8_scaling)},
      {"fp8-amax-history", num(c.fp8_amax_history)},
      {"device", to_string(c.device)},
      {"seed", std::to_string(c.seed)},
      {"recompute", flag(c.recompute)},
      {"chunked-head", flag(c.chunked_head)},
      {"tf32", flag(c.tf32)},
      {"cuda_graph", flag(c.cuda_graph)},
      {"zero", num(c.zero)},
      {"grad-comm-dtype", to_string(c.grad_comm_dtype)},
      {"bucket-mb", num(c.bucket_mb)},
      {"max-memory", num(c.max_memory_gib)},
      {"max-nonfinite-steps", num(c.max_nonfinite_steps)},
      {"max-loss-ratio", num(c.max_loss_ratio)},
      {"loss-ratio-steps", num(c.loss_ratio_steps)},
      {"max-zero-grad-steps", num(c.max_zero_grad_steps)},
      // optimizer
      {"optimizer", to_string(c.optimizer)},
      {"lr", num(c.lr)},
      {"weight-decay", num(c.weight_decay)},
      {"beta1", num(c.beta1)},
      {"beta2", num(c.beta2)},
      {"eps", num(c.eps)},
      {"momentum", num(c.momentum)},
      {"clip", num(c.clip)},
      {"lr-schedule", to_string(c.lr_schedule)},
      {"warmup", num(c.warmup)},
      {"min-lr-ratio", num(c.min_lr_ratio)},
      // run
      {"steps", num(c.steps)},
      {"data", path_or_none(c.data)},
      {"data identity", data_identity(c.data)},
      {"shuffle", flag(c.shuffle)},
      {"data-changed", flag(c.data_changed)},
      {"val-data", path_or_none(c.val_data)},
      {"val-data identity", data_identity(c.val_data)},
      {"eval-every", num(c.eval_every)},
      {"eval-tokens", num(c.eval_tokens)},
      {"checkpoint-dir", path_or_none(c.checkpoint_dir)},
      {"checkpoint-every", num(c.checkpoint_every)},
      {"resume", flag(c.resume)},
      {"allow-unchecked", flag(c.allow_unchecked)},
      {"overwrite-checkpoints", flag(c.overwrite_checkpoints)},
      {"async-checkpoint", flag(c.async_checkpoint)},
      {"save-on-signal", flag(c.save_on_signal)},
      {"trace", path_or_none(c.trace)},
      {"run-dir", path_or_none(c.run_dir)},
  };
}

uint64_t fingerprint_hash(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string describe_disagreement(const std::string& key, const std::vector<std::string>& values) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;  // value → ranks, in order of first rank
  for (int r = 0; r < static_cast<int>(values.size()); ++r) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == values[r]; });
    if (it == groups.end())
      groups.push_back({values[r], {r}});
    else
      it->second.push_back(r);
  }
  std::ostringstream o;
  o << "ranks disagree on " << key << ": ";
  for (size_t i = 0; i < groups.size(); ++i) o << (i ? ", " : "") << rank_list(groups[i].second) << " " << groups[i].first;
  const bool identity = key.size() > 9 && key.compare(key.size() - 9, 9, " identity") == 0;
  o << (identity ? " (the same path holds different files on these ranks: every rank must read the same data)"
                 : " (every rank must be started with the same options)");
  return o.str();
}

void check_ranks_agree(const Fingerprint& mine, comm::Communicator& world) {
  const int slots = kFingerprintSlots;
  ST_CHECK(static_cast<int>(mine.size()) < slots, ValueError,
           "run fingerprint: " << mine.size() << " keys do not fit in " << slots - 1 << " slots");
  std::vector<int64_t> hashes(slots, 0);
  std::string names;
  for (size_t i = 0; i < mine.size(); ++i) {
    hashes[i] = std::bit_cast<int64_t>(fingerprint_hash(mine[i].first + "=" + mine[i].second));
    names += mine[i].first + ";";
  }
  hashes[slots - 1] = std::bit_cast<int64_t>(fingerprint_hash(names));
  const std::vector<int64_t> all = gather_i64(world, hashes);  // (size · slots)
  const int size = world.size();
  auto differs = [&](int slot) {
    for (int r = 1; r < size; ++r)
      if (all[r * slots + slot] != all[slot]) return true;
    return false;
  };
  if (differs(slots - 1))
    ST_THROW(ValueError, "ranks run different shardtrain builds (their option lists differ); start every rank "
                         "with the same binary");
  std::vector<size_t> bad;
  for (size_t i = 0; i < mine.size(); ++i)
    if (differs(static_cast<int>(i))) bad.push_back(i);
  if (bad.empty()) return;

  // every rank found the same first key: exchange its printable value, NUL-padded
  constexpr int words = kFingerprintValueBytes / 8;
  std::vector<int64_t> value(words, 0);
  const std::string& v = mine[bad.front()].second;
  std::memcpy(value.data(), v.data(), std::min<size_t>(v.size(), kFingerprintValueBytes - 1));
  const std::vector<int64_t> values = gather_i64(world, value);  // (size · words)
  std::vector<std::string> per_rank;
  for (int r = 0; r < size; ++r) {
    const char* p = reinterpret_cast<const char*>(values.data() + r * words);
    per_rank.emplace_back(p, strnlen(p, kFingerprintValueBytes));
  }
  std::string line = describe_disagreement(mine[bad.front()].first, per_rank);
  if (bad.size() > 1) {
    line += "; they also disagree on ";
    for (size_t i = 1; i < bad.size(); ++i) line += (i > 1 ? ", " : "") + mine[bad[i]].first;
  }
  ST_THROW(ValueError, line);
}

}  // namespace st::runtime
