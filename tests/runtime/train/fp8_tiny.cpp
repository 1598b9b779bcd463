#include "fp8_tiny.h"

#include <cstdint>
#include <filesystem>
#include <vector>

#include "runtime/data/token_data.h"
#include "tensor/philox.h"

namespace st::runtime::test {

std::string fp8_token_file(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/tokens.bin";
  std::vector<uint16_t> tokens(20000);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<uint16_t>(philox_uniform(3, i) < 0.8f ? i % 37 : (philox4x32_10(4, i).x[0] % 62));
  write_token_file(path, tokens);
  return path;
}

TrainConfig fp8_tiny_config(const std::string& family, const std::string& dir) {
  TrainConfig c;
  c.model = family;
  c.layers = 2;
  c.d_model = 64;
  c.heads = 4;
  if (family == "llama") c.kv_heads = 2, c.ffn = 96;
  c.vocab = 64;
  c.seq_len = 16;
  c.micro_batch = 4;
  c.grad_accum = 2;
  c.steps = 20;
  c.lr = 3e-3;
  c.warmup = 0;
  c.data = fp8_token_file(dir);
  c.progress = false;
  c.log_every = 0;
  return c;
}

}  // namespace st::runtime::test
