// The fuzz tests' harness: a seeded mutator of byte strings and a case runner. A case passes when
// the reader returns or throws a typed st::Error; it fails on any other exception, and the whole
// binary fails, naming the case, on a signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT: the
// handler writes the case's name, then the default action runs) or when a case outlives its
// deadline (a watchdog thread writes the name and _exits with status 3).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace st::fuzz {

using Bytes = std::string;

// Per-case deadline: generous for a sanitizer build (the slowest case here takes ~20 ms in Release).
constexpr std::chrono::seconds kCaseDeadline{20};

// What became of a case: "" when `fn` returned or threw a st::Error, else what escaped
// ("St9bad_alloc: std::bad_alloc"); `rejected` says whether it threw a st::Error. Installs the
// signal handlers and the watchdog on first use.
struct CaseResult {
  std::string escaped;
  bool rejected = false;
};
CaseResult run_case(const std::string& name, const std::function<void()>& fn,
                    std::chrono::milliseconds deadline = kCaseDeadline);

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}
  uint64_t next() { return rng_(); }
  int64_t range(int64_t lo, int64_t hi);  // uniform in [lo, hi]
  bool coin(double p = 0.5);
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[static_cast<size_t>(range(0, static_cast<int64_t>(v.size()) - 1))]; }
  // In place: flips 1..max_flips random bits in [begin, end) (clamped to the size).
  void flip_bits(Bytes& b, size_t begin, size_t end, int max_flips);
  void set_random_bytes(Bytes& b, size_t begin, size_t end, int count);
  Bytes truncate(const Bytes& b);  // a random prefix (possibly empty)
  // An integer from a menu of boundary values (0, ±1, powers of two ± 1, INT64 limits) or random.
  int64_t interesting_int();

 private:
  std::mt19937_64 rng_;
};

void write_file(const std::string& path, const Bytes& bytes);
Bytes read_file(const std::string& path);
std::string temp_path(const std::string& name);  // under the system temp dir, unique per process

}  // namespace st::fuzz
