// The fuzz harness (see the header).
#include "tests/fuzz/fuzz_harness.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>
#include <typeinfo>

#include "tensor/error.h"

namespace st::fuzz {
namespace {

// The running case, readable from a signal handler: a fixed buffer and its start time.
char g_case[512] = "(none)";
std::atomic<int64_t> g_started_ns{0};  // 0: no case running
std::atomic<int64_t> g_deadline_ns{0};

void write_case(const char* why) {
  const char* a = "\nfuzz: case '";
  ssize_t r = ::write(2, a, std::strlen(a));
  r = ::write(2, g_case, strnlen(g_case, sizeof g_case));
  r = ::write(2, "' ", 2);
  r = ::write(2, why, std::strlen(why));
  r = ::write(2, "\n", 1);
  (void)r;
}

void on_signal(int sig) {
  write_case(sig == SIGABRT ? "aborted (SIGABRT)" : "died on a signal");
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void install_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, on_signal);
    std::thread([] {
      for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        const int64_t t0 = g_started_ns.load();
        if (t0 != 0 && now_ns() - t0 > g_deadline_ns.load()) {
          write_case("ran past its deadline (a hang)");
          ::_exit(3);
        }
      }
    }).detach();
  });
}

}  // namespace

CaseResult run_case(const std::string& name, const std::function<void()>& fn, std::chrono::milliseconds deadline) {
  install_once();
  std::snprintf(g_case, sizeof g_case, "%s", name.c_str());
  g_deadline_ns.store(std::chrono::nanoseconds(deadline).count());
  g_started_ns.store(now_ns());
  CaseResult r;
  try {
    fn();
  } catch (const st::Error&) {
    r.rejected = true;  // a typed error: the reader rejected the input as it should
  } catch (const std::exception& e) {
    r.escaped = std::string(typeid(e).name()) + ": " + e.what();
  } catch (...) {
    r.escaped = "an exception that is not a std::exception";
  }
  g_started_ns.store(0);
  return r;
}

int64_t Mutator::range(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
bool Mutator::coin(double p) { return std::bernoulli_distribution(p)(rng_); }

void Mutator::flip_bits(Bytes& b, size_t begin, size_t end, int max_flips) {
  end = std::min(end, b.size());
  if (begin >= end) return;
  const int n = static_cast<int>(range(1, max_flips));
  for (int i = 0; i < n; ++i) {
    const size_t at = static_cast<size_t>(range(static_cast<int64_t>(begin), static_cast<int64_t>(end) - 1));
    b[at] = static_cast<char>(b[at] ^ (1 << range(0, 7)));
  }
}

void Mutator::set_random_bytes(Bytes& b, size_t begin, size_t end, int count) {
  end = std::min(end, b.size());
  if (begin >= end) return;
  for (int i = 0; i < count; ++i)
    b[static_cast<size_t>(range(static_cast<int64_t>(begin), static_cast<int64_t>(end) - 1))] =
        static_cast<char>(range(0, 255));
}

Bytes Mutator::truncate(const Bytes& b) { return b.substr(0, static_cast<size_t>(range(0, static_cast<int64_t>(b.size()) - 1))); }

int64_t Mutator::interesting_int() {
  static const std::vector<int64_t> menu = {0, 1, -1, 2, 7, 255, 256, 65535, 65536, (1ll << 31) - 1, 1ll << 31,
                                            -(1ll << 31), (1ll << 32) + 1, (1ll << 53) + 1, 1ll << 62,
                                            std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
  if (coin(0.8))  // ± 2 around a boundary, wrapping (unsigned) past the int64 limits
    return static_cast<int64_t>(static_cast<uint64_t>(pick(menu)) + static_cast<uint64_t>(coin(0.2) ? range(-2, 2) : 0));
  return static_cast<int64_t>(next());
}

void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("fuzz: cannot write " + path);
}

Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  if (!in) throw std::runtime_error("fuzz: cannot read " + path);
  return s.str();
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("st_fuzz_" + std::to_string(::getpid()) + "_" + name)).string();
}

}  // namespace st::fuzz
