// What checking every read costs (runtime/io/safetensors_checksums.h): one 256 MiB f32 tensor
// (4096 × 16384) written by our writer (a checksum per 64 KiB chunk) and the same bytes without
// checksums (as Hugging Face writes them), read from the page cache (each read once before the
// timing) in the ways a rank reads: whole, a tp row slice (dim 0, half), a tp column slice (dim 1,
// half: every chunk touched), a ZeRO-3 window (1/8 of the elements). Prints, per read, the best
// of 5 thread CPU times (user + system: the copy from the page cache is the kernel's; a loaded
// machine's waits do not count) and the bytes read from each file. Usage: bench_checkpoint_read [DIR]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <unistd.h>

#include "runtime/io/safetensors.h"

using namespace st;
using namespace st::runtime;

namespace {

double thread_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

double best_ms(const std::function<void()>& fn) {
  fn();  // warm: page cache, allocator
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const double t0 = thread_ms();
    fn();
    best = std::min(best, thread_ms() - t0);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : std::filesystem::temp_directory_path().string();
  const std::string checked = dir + "/bench_checked_" + std::to_string(::getpid()) + ".safetensors";
  const std::string plain = dir + "/bench_plain_" + std::to_string(::getpid()) + ".safetensors";
  const int64_t R = 4096, C = 16384;
  Tensor w = Tensor::empty({R, C}, DType::f32);  // (R, C)
  float* p = w.data<float>();
  for (int64_t i = 0; i < R * C; ++i) p[i] = static_cast<float>(i % 1000) * 0.001f;
  save_safetensors(checked, {{"w", w}});
  {
    std::string h = R"({"w":{"dtype":"F32","shape":[4096,16384],"data_offsets":[0,268435456]}})";
    h.append((8 - h.size() % 8) % 8, ' ');
    std::ofstream out(plain, std::ios::binary);
    const uint64_t n = h.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << h;
    out.write(static_cast<const char*>(w.data_ptr()), static_cast<std::streamsize>(w.nbytes()));
  }
  w = Tensor();
  SafetensorsReader a(checked), b(plain);
  struct Case {
    const char* name;
    std::function<void(const SafetensorsReader&)> read;
  };
  const std::vector<Case> cases = {
      {"whole tensor", [](const SafetensorsReader& r) { r.read("w"); }},
      {"tp 2 row slice (dim 0)", [&](const SafetensorsReader& r) { r.read_ranges("w", 0, {{R / 2, R / 2}}); }},
      {"tp 2 column slice (dim 1)", [&](const SafetensorsReader& r) { r.read_ranges("w", 1, {{C / 2, C / 2}}); }},
      {"ZeRO-3 window, dp 8", [&](const SafetensorsReader& r) { r.read_runs("w", {{R * C * 3 / 8 + 5, 0, R * C / 8}}, R * C / 8); }},
  };
  std::printf("%-28s %12s %12s %14s %14s\n", "read", "checked ms", "plain ms", "checked MiB", "plain MiB");
  for (const Case& c : cases) {
    uint64_t before = safetensors_bytes_read();
    c.read(a);
    const double ca = static_cast<double>(safetensors_bytes_read() - before) / (1 << 20);
    before = safetensors_bytes_read();
    c.read(b);
    const double cb = static_cast<double>(safetensors_bytes_read() - before) / (1 << 20);
    const double ta = best_ms([&] { c.read(a); }), tb = best_ms([&] { c.read(b); });
    std::printf("%-28s %12.1f %12.1f %14.2f %14.2f\n", c.name, ta, tb, ca, cb);
  }
  std::filesystem::remove(checked);
  std::filesystem::remove(plain);
  return 0;
}
