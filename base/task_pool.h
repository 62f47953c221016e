// TaskPool: a fixed set of threads running tasks in FIFO order: the worker's pipeline threads (the samples of
// earlier batches finish first, so batches leave the worker in the order they were leased) and the client's
// openers of sealed batches. Each thread owns a Context (a worker's decoders and scratch buffers) that tasks
// receive, so nothing on the hot path is shared between threads.
//
// Thread safety: Push may be called from any thread; the destructor drains nothing (pending tasks are dropped).
#pragma once

#include <pthread.h>

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "base/sync.h"

namespace stoker {

template <typename Context>
class TaskPool {
 public:
  using Task = std::function<void(Context&)>;

  // `name`: the threads' name (top -H, per-thread CPU figures), at most 15 characters; null: the creator's.
  explicit TaskPool(unsigned threads, const char* name = nullptr) {
    for (unsigned i = 0; i < threads; ++i) {
      threads_.emplace_back([this, name] {
        if (name != nullptr) ::pthread_setname_np(::pthread_self(), name);
        Context context;
        while (true) {
          Task task;
          {
            MutexLock lock(mu_);
            ready_.Wait(mu_, [this] {
              mu_.AssertHeld();
              return stopping_ || !tasks_.empty() || !first_.empty();
            });
            if (stopping_) return;
            std::deque<Task>& from = first_.empty() ? tasks_ : first_;
            task = std::move(from.front());
            from.pop_front();
          }
          task(context);
        }
      });
    }
  }

  ~TaskPool() {
    {
      MutexLock lock(mu_);
      stopping_ = true;
    }
    ready_.NotifyAll();
    for (auto& t : threads_) t.join();
  }

  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  void Push(Task task) {
    {
      MutexLock lock(mu_);
      tasks_.push_back(std::move(task));
    }
    ready_.NotifyOne();
  }

  // Ahead of every task pushed with Push (and after those pushed with PushFirst before it): the last step of work
  // already under way (sealing a finished batch), which must not wait behind the samples of batches queued after it.
  void PushFirst(Task task) {
    {
      MutexLock lock(mu_);
      first_.push_back(std::move(task));
    }
    ready_.NotifyOne();
  }

  size_t queued() const {
    MutexLock lock(mu_);
    return tasks_.size() + first_.size();
  }
  unsigned threads() const { return static_cast<unsigned>(threads_.size()); }

 private:
  mutable Mutex mu_;
  CondVar ready_;
  std::deque<Task> tasks_ STOKER_GUARDED_BY(mu_);
  std::deque<Task> first_ STOKER_GUARDED_BY(mu_);  // run before tasks_, in their own order
  bool stopping_ STOKER_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace stoker
