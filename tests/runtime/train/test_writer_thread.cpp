// WriterThread (runtime/train/writer_thread.h): the asynchronous save's one background thread.
//   - every job runs on the same thread, not the caller's, in hand-over order; run() while a job
//     is in hand waits for it; wait() returns with the job's writes visible; the destructor waits
//     for the job in hand;
//   - a job runs as an ordinary thread (SCHED_OTHER: its wake-ups from the disk are not put off),
//     and the idle thread waits as batch work (SCHED_BATCH: handed a job, it does not preempt the
//     training thread — which cost 3 ms at the step boundary on 2 busy cores).
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "runtime/train/writer_thread.h"

using namespace st::runtime;

namespace {

int policy_of(pthread_t t) {
  int policy = -1;
  sched_param p{};
  EXPECT_EQ(pthread_getschedparam(t, &policy, &p), 0);
  return policy;
}

TEST(WriterThread, JobsRunInOrderOnOneThread) {
  std::vector<int> order;  // written by the jobs only; read after wait()
  std::thread::id ids[3];
  {
    WriterThread w;
    for (int k = 0; k < 3; ++k)
      w.run([&, k] {
        if (k == 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));  // run(1) waits for it
        order.push_back(k);
        ids[k] = std::this_thread::get_id();
      });
    w.wait();
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(ids[0], ids[1]);
    EXPECT_EQ(ids[1], ids[2]);
    EXPECT_NE(ids[0], std::this_thread::get_id());
  }
  std::atomic<bool> done{false};
  {
    WriterThread w;
    w.run([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      done = true;
    });
  }  // the destructor waits for the job in hand
  EXPECT_TRUE(done);
}

TEST(WriterThread, OrdinaryWhileWorkingBatchWhileIdle) {
  WriterThread w;
  pthread_t self{};
  int working = -1;
  w.run([&] {
    self = pthread_self();
    working = policy_of(self);
  });
  w.wait();
  EXPECT_EQ(working, SCHED_OTHER);
  // wait() returned under the thread's lock, which it releases only once waiting again (as batch)
  EXPECT_EQ(policy_of(self), SCHED_BATCH);
}

}  // namespace
