// Tokenizer speed, one thread: a Hugging Face tokenizer.json (runtime/data/hf_tokenizer.h) on a
// text repeated to about --mb MB, encoded whole (as `prepare --text` does) and line by line (as a
// corpus of short documents is), MB/s by the wall clock and by this thread's CPU time (the two
// differ on a shared machine). The peer: tests/bench/bench_tokenizer_hf.js, the tokenizers
// library's encode and encodeBatch on the same text; docs/PERFORMANCE.md has both.
//   bench_tokenizer --tokenizer DIR|FILE --text FILE [--mb 4] [--reps 3]
#include <time.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/data/hf_tokenizer.h"

namespace {

double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

template <class F>
void measure(const char* what, size_t bytes, int reps, F&& run) {
  // the first run starts with an empty per-word cache (a new thread's); the best is of all runs
  double best_wall = 1e30, best_cpu = 1e30, first_cpu = 0;
  size_t ids = 0;
  for (int r = 0; r < reps; ++r) {
    const auto w0 = std::chrono::steady_clock::now();
    const double c0 = thread_seconds();
    ids = run();
    const double cpu = thread_seconds() - c0;
    if (r == 0) first_cpu = cpu;
    best_cpu = std::min(best_cpu, cpu);
    best_wall = std::min(best_wall, std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
  }
  std::printf("%-20s %6.2f MB %9zu ids  wall %6.3f s %7.2f MB/s  cpu %6.3f s %7.2f MB/s (best of %d)  first run cpu %7.2f MB/s\n",
              what, bytes / 1e6, ids, best_wall, bytes / 1e6 / best_wall, best_cpu, bytes / 1e6 / best_cpu, reps,
              bytes / 1e6 / first_cpu);
}

}  // namespace

int main(int argc, char** argv) {
  std::string tok_path, text_path;
  double mb = 4;
  int reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--tokenizer") tok_path = v;
    else if (k == "--text") text_path = v;
    else if (k == "--mb") mb = std::stod(v);
    else if (k == "--reps") reps = std::stoi(v);
  }
  if (tok_path.empty() || text_path.empty()) {
    std::fprintf(stderr, "usage: bench_tokenizer --tokenizer DIR|FILE --text FILE [--mb 4] [--reps 3]\n");
    return 2;
  }
  std::ifstream in(text_path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string one = ss.str();
  std::string text;
  while (text.size() < mb * 1e6) text += one;
  std::vector<std::string> lines;
  for (size_t i = 0; i < text.size();) {
    const size_t e = text.find('\n', i);
    const size_t end = e == std::string::npos ? text.size() : e + 1;
    lines.push_back(text.substr(i, end - i));
    i = end;
  }
  const st::runtime::HfTokenizer tok = st::runtime::HfTokenizer::load(tok_path);
  // each measurement on a thread of its own, so that its first run starts with an empty cache
  const auto on_new_thread = [](auto&& f) { std::thread t(f); t.join(); };
  std::printf("%s on %s x%zu (%zu lines)\n", tok.file().c_str(), text_path.c_str(), text.size() / one.size(), lines.size());
  on_new_thread([&] { measure("encode(whole text)", text.size(), reps, [&] { return tok.encode(text).size(); }); });
  on_new_thread([&] { measure("encode(each line)", text.size(), reps, [&] {
    size_t n = 0;
    std::vector<int32_t> ids;
    for (const std::string& l : lines) {
      ids.clear();
      tok.encode(l, ids);
      n += ids.size();
    }
    return n;
  }); });
  return 0;
}
