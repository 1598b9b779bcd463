// GPT training throughput on one GPU through the real trainer (runtime::Trainer, the same path as
// `shardtrain train --device cuda`): GPT-2 124M by default (12 layers, C 768, 12 heads, vocab
// 50304, T 1024, micro-batch 16, fp16 with loss scaling), AdamW, random tokens written to a
// temporary token file. Runs --warmup steps, then times --steps steps end to end (wall clock,
// device synchronised before and after) and prints tokens/s, the median step time, MFU against
// a given peak and the allocator's peak bytes (st::cuda::bytes_peak). One JSON line at the end.
//   usage: bench_gpt_train [--layers 12] [--d-model 768] [--heads 12] [--vocab 50304]
//          [--seq-len 1024] [--micro-batch 16] [--precision fp16|bf16|fp32] [--steps 20]
//          [--warmup 5] [--peak-tflops 989] [--dir /tmp]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "launch/gpu_env.h"
#include "runtime/data/token_data.h"
#include "runtime/train/trainer.h"
#include "tensor/cuda/runtime.h"
#include "tensor/error.h"

using namespace st;

int main(int argc, char** argv) {
  std::map<std::string, std::string> a = {{"layers", "12"},     {"d-model", "768"},   {"heads", "12"},
                                          {"vocab", "50304"},   {"seq-len", "1024"},  {"micro-batch", "16"},
                                          {"precision", "fp16"}, {"steps", "20"},     {"warmup", "5"},
                                          {"peak-tflops", "989"}, {"dir", "/tmp"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0 || !a.count(k.substr(2))) {
      std::cerr << "unknown option " << k << "\n";
      return 2;
    }
    a[k.substr(2)] = argv[i + 1];
  }
  try {
    launch::apply_gpu_environment();  // SHARDTRAIN_ATTENTION, as shardtrain reads it
    runtime::TrainConfig cfg;
    cfg.model = "gpt";
    cfg.layers = std::stoll(a["layers"]);
    cfg.d_model = std::stoll(a["d-model"]);
    cfg.heads = std::stoll(a["heads"]);
    cfg.vocab = std::stoll(a["vocab"]);
    cfg.seq_len = std::stoll(a["seq-len"]);
    cfg.micro_batch = std::stoll(a["micro-batch"]);
    cfg.precision = runtime::parse_enum<runtime::Precision>(a["precision"], "--precision");
    cfg.device = Device::cuda;
    cfg.lr = 3e-4;  // as the PyTorch anchor (torch_gpt_bench.py)
    cfg.weight_decay = 0.1;
    cfg.clip = 1.0;
    const int64_t warmup = std::stoll(a["warmup"]), steps = std::stoll(a["steps"]);
    cfg.steps = warmup + steps;
    cfg.log_every = 0;
    cfg.progress = false;
    const int64_t B = cfg.micro_batch, T = cfg.seq_len;

    // random tokens, enough for every step without wrapping: (steps·B·T + 1) u16
    cfg.data = a["dir"] + "/bench_gpt_train_" + std::to_string(::getpid()) + ".bin";
    std::vector<uint16_t> tokens(static_cast<size_t>(cfg.steps * B * T + 1));  // (N)
    std::mt19937 rng(1);
    std::uniform_int_distribution<int> dist(0, static_cast<int>(cfg.vocab) - 1);
    for (auto& t : tokens) t = static_cast<uint16_t>(dist(rng));
    runtime::write_token_file(cfg.data, tokens);

    runtime::Trainer trainer(cfg);
    int64_t n_params = 0;
    for (auto& [n, p] : trainer.model().named_parameters()) n_params += p.numel();
    std::printf("GPT %lld layers, C %lld, %lld heads, V %lld, T %lld, B %lld, %s: %.1f M parameters\n",
                (long long)cfg.layers, (long long)cfg.d_model, (long long)cfg.heads, (long long)cfg.vocab,
                (long long)T, (long long)B, runtime::to_string(cfg.precision).c_str(), n_params / 1e6);
    for (int64_t s = 0; s < warmup; ++s) {
      auto m = trainer.train_step();
      std::printf("warm-up step %lld: loss %.4f, %.1f ms%s\n", (long long)m.step, m.loss, m.step_ms,
                  m.skipped ? " (skipped: fp16 overflow)" : "");
    }
    cuda::synchronize();
    const double warm_peak_gib = cuda::bytes_peak() / double(1 << 30);  // model, optimizer, first steps
    cuda::reset_peak();
    std::vector<double> step_ms;
    double last_loss = 0;
    int64_t skipped = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t s = 0; s < steps; ++s) {
      auto m = trainer.train_step();
      step_ms.push_back(m.step_ms);
      last_loss = m.loss;
      skipped += m.skipped;
    }
    cuda::synchronize();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::sort(step_ms.begin(), step_ms.end());
    const double tok_s = static_cast<double>(steps * B * T) / secs;
    // per token, forward + backward: 6 per parameter + 6·L·T·C for causal attention (the anchor's count)
    const double flops_per_tok = 6.0 * n_params + 6.0 * cfg.layers * cfg.d_model * T;
    const double tflops = tok_s * flops_per_tok / 1e12;
    const double peak_gib = cuda::bytes_peak() / double(1 << 30);
    std::printf("peak allocated during warm-up %.2f GiB\n", warm_peak_gib);
    std::printf("timed %lld steps: %.0f tokens/s, median step %.1f ms, %.1f TFLOP/s (MFU %.1f%% of %s), "
                "peak allocated %.2f GiB, last loss %.4f, %lld skipped\n",
                (long long)steps, tok_s, step_ms[step_ms.size() / 2], tflops, 100 * tflops / std::stod(a["peak-tflops"]),
                a["peak-tflops"].c_str(), peak_gib, last_loss, (long long)skipped);
    std::printf("{\"impl\": \"shardtrain\", \"dtype\": \"%s\", \"batch\": %lld, \"seq_len\": %lld, \"tokens_per_s\": %.0f, "
                "\"median_step_ms\": %.2f, \"tflops\": %.1f, \"peak_mem_gib\": %.2f, \"params\": %lld}\n",
                runtime::to_string(cfg.precision).c_str(), (long long)B, (long long)T, tok_s, step_ms[step_ms.size() / 2], tflops, peak_gib,
                (long long)n_params);
    std::filesystem::remove(cfg.data);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_gpt_train: " << e.what() << "\n";
    return 1;
  }
}
