// WriterThread: one long-lived background thread that runs one job at a time, for the
// asynchronous checkpoint (runtime/train/async_checkpoint.h). Starting a std::thread per job cost
// the step boundary ~0.1 ms of a later save (measured on the CPU: docs/design.md "--async-checkpoint
// 1"); handing a job to a thread that waits costs a lock and a notify. The job's outcome is the
// caller's to record (the job catches its own exceptions: an exception escaping a job ends the
// process, as one escaping a std::thread would).
#pragma once
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace st::runtime {

class WriterThread {
 public:
  WriterThread();   // the thread starts here and waits for a job
  ~WriterThread();  // waits for the job in hand, then the thread ends
  WriterThread(const WriterThread&) = delete;
  WriterThread& operator=(const WriterThread&) = delete;

  // Hands `job` to the thread (after the one in hand, if any, has finished).
  void run(std::function<void()> job);
  // Until the job in hand (if any) has finished: what it wrote is visible to the caller on return.
  void wait();

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> job_;  // the job in hand (empty: none)
  bool busy_ = false;          // a job was handed and has not finished
  bool stop_ = false;
  std::thread thread_;         // last: started after the members it reads
};

}  // namespace st::runtime
