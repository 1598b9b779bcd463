// WriterThread (see the header): a job slot under a mutex, one condition variable for both ways.
#include "runtime/train/writer_thread.h"

#include <pthread.h>
#include <sched.h>

namespace st::runtime {

WriterThread::WriterThread() : thread_([this] { loop(); }) {}

WriterThread::~WriterThread() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !busy_; });
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void WriterThread::run(std::function<void()> job) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !busy_; });
    job_ = std::move(job);
    busy_ = true;
  }
  changed_.notify_all();
}

void WriterThread::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !busy_; });
}

namespace {

// While it waits for a job this thread is batch work: woken with one, it does not preempt the
// thread that handed it over (the training thread, which would otherwise wait out a time slice
// where cores are short: measured 3 ms at the boundary on 2 busy cores). Once it has the job it is
// an ordinary thread again, so its wake-ups from the disk's writes are not put off. Where a policy
// is refused the thread stays as it was.
#if defined(SCHED_BATCH)
constexpr int kBatch = SCHED_BATCH, kOrdinary = SCHED_OTHER;
#else
constexpr int kBatch = 0, kOrdinary = 0;
#endif
void set_policy([[maybe_unused]] int policy) {
#if defined(SCHED_BATCH)  // Linux's
  const sched_param none{};
  pthread_setschedparam(pthread_self(), policy, &none);
#endif
}

}  // namespace

void WriterThread::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    set_policy(kBatch);
    changed_.wait(lock, [this] { return busy_ || stop_; });
    if (!busy_) return;  // stop_, nothing in hand
    std::function<void()> job = std::move(job_);
    job_ = nullptr;
    lock.unlock();
    set_policy(kOrdinary);
    job();
    job = nullptr;  // what the job captured goes on this thread, before the caller hears it finished
    lock.lock();
    busy_ = false;
    changed_.notify_all();
  }
}

}  // namespace st::runtime
