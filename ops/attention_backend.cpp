// The attention backend setting (see the header).
#include "ops/attention_backend.h"

#include <atomic>

#include "tensor/error.h"

namespace st::ops {
namespace {
std::atomic<int> g_backend{static_cast<int>(AttentionBackend::Deterministic)};
}  // namespace

AttentionBackend attention_backend() { return static_cast<AttentionBackend>(g_backend.load()); }
void set_attention_backend(AttentionBackend b) { g_backend.store(static_cast<int>(b)); }

AttentionBackend parse_attention_backend(const std::string& name, const std::string& where) {
  for (AttentionBackend b :
       {AttentionBackend::Deterministic, AttentionBackend::Fast, AttentionBackend::Cudnn, AttentionBackend::Flash})
    if (name == to_string(b)) return b;
  ST_THROW(ValueError, where << "=" << name << ": not one of deterministic, fast, cudnn, flash");
}

std::string to_string(AttentionBackend b) {
  switch (b) {
    case AttentionBackend::Deterministic: return "deterministic";
    case AttentionBackend::Fast: return "fast";
    case AttentionBackend::Cudnn: return "cudnn";
    case AttentionBackend::Flash: return "flash";
  }
  return "?";
}

}  // namespace st::ops
