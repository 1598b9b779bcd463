// The documented test variables → TrainSeams (see the header).
#include "launch/test_seams.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "launch/options.h"

namespace st::launch {
namespace {

const char* var(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int64_t whole_number(const std::string& text, const char* name) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || v < 0)
    throw UsageError(std::string(name) + "=" + text + ": expected a whole number ≥ 0 (docs/testing.md)");
  return v;
}

bool flag(const char* name) {
  const char* v = var(name);
  if (!v) return false;
  const std::string s = v;
  if (s != "0" && s != "1") throw UsageError(std::string(name) + "=" + s + ": expected 1 or 0 (docs/testing.md)");
  return s == "1";
}

}  // namespace

runtime::TrainSeams train_seams_from_environment() {
  runtime::TrainSeams seams;
  if (const char* at = var("SHARDTRAIN_TEST_INF_STEP")) {
    std::string s = at;
    const bool onward = s.back() == '+';
    if (onward) s.pop_back();
    const int64_t from = whole_number(s, "SHARDTRAIN_TEST_INF_STEP");
    const char* r = var("SHARDTRAIN_TEST_INF_RANK");
    const int rank = r ? static_cast<int>(whole_number(r, "SHARDTRAIN_TEST_INF_RANK")) : -1;
    seams.after_gradients = runtime::infinite_gradient(from, onward, rank);
  }
  if (const char* at = var("SHARDTRAIN_TEST_KILL_STEP")) {
    const int64_t step = whole_number(at, "SHARDTRAIN_TEST_KILL_STEP");
    const char* r = var("SHARDTRAIN_TEST_KILL_RANK");
    const int64_t rank = r ? whole_number(r, "SHARDTRAIN_TEST_KILL_RANK") : 0;
    const char* m = var("SHARDTRAIN_TEST_KILL_MARK");
    const std::string mark = m ? m : "";
    auto before = seams.after_gradients;
    seams.after_gradients = [=](int64_t s, int rk, std::vector<Tensor>& grads) {
      if (before) before(s, rk, grads);
      if (s != step || rk != rank) return;
      if (!mark.empty()) {
        if (std::filesystem::exists(mark)) return;  // killed once already: a restart runs on
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::system_clock::now().time_since_epoch());
        std::ofstream(mark) << ns.count() << "\n";  // closed (flushed) before the kill
      }
      std::raise(SIGKILL);
    };
  }
  if (const char* at = var("SHARDTRAIN_TEST_SIGNAL_STEP")) {
    const int64_t step = whole_number(at, "SHARDTRAIN_TEST_SIGNAL_STEP");
    const char* r = var("SHARDTRAIN_TEST_SIGNAL_RANK");
    const int64_t rank = r ? whole_number(r, "SHARDTRAIN_TEST_SIGNAL_RANK") : 0;
    const char* n = var("SHARDTRAIN_TEST_SIGNAL");
    const std::string name = n ? n : "TERM";
    if (name != "INT" && name != "TERM")
      throw UsageError("SHARDTRAIN_TEST_SIGNAL=" + name + ": expected INT or TERM (docs/testing.md)");
    const int sig = name == "INT" ? SIGINT : SIGTERM;
    auto before = seams.after_gradients;
    seams.after_gradients = [=](int64_t s, int rk, std::vector<Tensor>& grads) {
      if (before) before(s, rk, grads);
      if (s == step && rk == rank) std::raise(sig);  // the handler's request (launch/stop_signals.h)
    };
  }
  seams.crash_before_commit = flag("SHARDTRAIN_TEST_CRASH_BEFORE_COMMIT");
  if (const char* r = var("SHARDTRAIN_TEST_CHECKPOINT_WRITER_FAIL")) {
    const int fail = static_cast<int>(whole_number(r, "SHARDTRAIN_TEST_CHECKPOINT_WRITER_FAIL"));
    seams.checkpoint_writer = [fail](int64_t step, int rank) {
      if (rank == fail)
        ST_THROW(IOError, "test seam SHARDTRAIN_TEST_CHECKPOINT_WRITER_FAIL: rank " << rank
                              << "'s writer stops after the model part of step " << step);
    };
  }
  seams.skip_grad_comm = flag("SHARDTRAIN_TEST_SKIP_GRAD_COMM");
  return seams;
}

std::function<void()> prepare_shard_hook_from_environment() {
  const char* at = var("SHARDTRAIN_TEST_PREPARE_KILL_SHARDS");
  if (!at) return {};
  const int64_t after = whole_number(at, "SHARDTRAIN_TEST_PREPARE_KILL_SHARDS");
  auto written = std::make_shared<int64_t>(0);
  return [after, written] {
    if (++*written == after) std::raise(SIGKILL);
  };
}

}  // namespace st::launch
