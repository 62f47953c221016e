// TaskPool: the worker's pipeline threads. Tasks run in FIFO order, so the samples of earlier batches finish
// first and batches leave the worker in the order they were leased. Each thread owns a Context (its decoders and
// scratch buffers) that tasks receive, so nothing on the hot path is shared between threads.
//
// Thread safety: Push may be called from any thread; the destructor drains nothing (pending tasks are dropped).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace stoker {

template <typename Context>
class TaskPool {
 public:
  using Task = std::function<void(Context&)>;

  explicit TaskPool(unsigned threads) {
    for (unsigned i = 0; i < threads; ++i) {
      threads_.emplace_back([this] {
        Context context;
        while (true) {
          Task task;
          {
            std::unique_lock<std::mutex> lock(mu_);
            ready_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
            if (stopping_) return;
            task = std::move(tasks_.front());
            tasks_.pop_front();
          }
          task(context);
        }
      });
    }
  }

  ~TaskPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (auto& t : threads_) t.join();
  }

  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  void Push(Task task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    ready_.notify_one();
  }

  size_t queued() const {
    std::lock_guard<std::mutex> lock(mu_);
    return tasks_.size();
  }
  unsigned threads() const { return static_cast<unsigned>(threads_.size()); }

 private:
  mutable std::mutex mu_;
  std::condition_variable ready_;
  std::deque<Task> tasks_;  // guarded by mu_
  bool stopping_ = false;   // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace stoker
