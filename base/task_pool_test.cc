// TaskPool: tasks run in the order pushed, except that those pushed with PushFirst go first, in their own order.
#include "base/task_pool.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace stoker {
namespace {

struct NoContext {};

TEST(TaskPool, TasksRunInOrderAndPushFirstGoesAheadOfTheQueue) {
  Mutex mu;
  CondVar changed;
  bool release = false;
  bool started = false;
  std::vector<std::string> ran;
  {
    TaskPool<NoContext> pool(1);
    // The one thread waits in its first task while the others queue behind it.
    pool.Push([&](NoContext&) {
      MutexLock lock(mu);
      started = true;
      changed.NotifyAll();
      (void)changed.WaitFor(mu, std::chrono::seconds(10), [&] {  // a failed test below releases it by timing out
        mu.AssertHeld();
        return release;
      });
    });
    {
      MutexLock lock(mu);
      ASSERT_TRUE(changed.WaitFor(mu, std::chrono::seconds(10), [&] {
        mu.AssertHeld();
        return started;
      }));
    }
    auto record = [&](std::string name) {
      return [&, name](NoContext&) {
        MutexLock lock(mu);
        ran.push_back(name);
        changed.NotifyAll();
      };
    };
    pool.Push(record("a"));
    pool.Push(record("b"));
    pool.PushFirst(record("first-1"));
    pool.PushFirst(record("first-2"));
    EXPECT_EQ(pool.queued(), 4u);
    {
      MutexLock lock(mu);
      release = true;
      changed.NotifyAll();
      ASSERT_TRUE(changed.WaitFor(mu, std::chrono::seconds(10), [&] {
        mu.AssertHeld();
        return ran.size() == 4;
      }));
    }
  }
  EXPECT_EQ(ran, (std::vector<std::string>{"first-1", "first-2", "a", "b"}));
}

}  // namespace
}  // namespace stoker
