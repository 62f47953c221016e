// BatchBufferPool: the memory batches are built in and sent from. Buffers are allocated once per size (64-byte
// aligned) and reused; a buffer goes back to the pool when ZeroMQ has finished sending it (its free callback),
// which may run on ZeroMQ's I/O thread. Memory stays bounded because the worker never builds more batches than
// its clients' credits allow; `outstanding()` shows how many buffers are in use.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <memory>
#include <mutex>
#include <vector>

#include "base/sync.h"

namespace stoker::worker {

class BatchBufferPool : public std::enable_shared_from_this<BatchBufferPool> {
 public:
  explicit BatchBufferPool(size_t max_idle_bytes = size_t{1} << 30) : max_idle_bytes_(max_idle_bytes) {}
  ~BatchBufferPool() {
    for (auto& b : idle_) std::free(b.data);
  }

  struct Buffer {
    uint8_t* data = nullptr;
    size_t size = 0;
  };

  Buffer Acquire(size_t size) {
    {
      MutexLock lock(mu_);
      for (size_t i = 0; i < idle_.size(); ++i) {
        if (idle_[i].size == size) {
          Buffer b = idle_[i];
          idle_[i] = idle_.back();
          idle_.pop_back();
          idle_bytes_ -= size;
          ++outstanding_;
          return b;
        }
      }
      ++outstanding_;
    }
    size_t rounded = (size + 63) / 64 * 64;
    auto* data = static_cast<uint8_t*>(std::aligned_alloc(64, rounded == 0 ? 64 : rounded));
    if (data == nullptr) throw std::bad_alloc();
    std::memset(data, 0, rounded);  // once per buffer: no stale memory ever leaves the process
    return {data, size};
  }

  void Release(Buffer b) {
    MutexLock lock(mu_);
    --outstanding_;
    if (idle_bytes_ + b.size > max_idle_bytes_) {
      std::free(b.data);
      return;
    }
    idle_bytes_ += b.size;
    idle_.push_back(b);
  }

  size_t outstanding() const {
    MutexLock lock(mu_);
    return outstanding_;
  }

 private:
  const size_t max_idle_bytes_;
  mutable Mutex mu_;
  std::vector<Buffer> idle_ STOKER_GUARDED_BY(mu_);
  size_t idle_bytes_ STOKER_GUARDED_BY(mu_) = 0;
  size_t outstanding_ STOKER_GUARDED_BY(mu_) = 0;
};

}  // namespace stoker::worker
