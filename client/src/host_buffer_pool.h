// HostBufferPool: a fixed set of equal host buffers (a stager's pinned memory) lent out one at a time. The client
// opens a sealed batch straight into one as it arrives (io_thread.cc), so that its decryption is the one host copy;
// the stager then swaps the buffer into its slot instead of copying (device_stage.cc). A buffer goes back to the
// pool when its holder lets it go, from any thread; the pool, and the memory it lends, live as long as any buffer.
//
// Thread safety: all of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "base/sync.h"

namespace stoker::client {

class HostBufferPool : public std::enable_shared_from_this<HostBufferPool> {
 public:
  struct GiveBack {
    std::shared_ptr<HostBufferPool> pool;
    void operator()(uint8_t* buffer) {  // lets go of the pool too: an emptied Buffer keeps nothing alive
      std::exchange(pool, nullptr)->Return(buffer);
    }
  };
  using Buffer = std::unique_ptr<uint8_t, GiveBack>;

  // `buffers`: the addresses of `bytes`-long buffers inside `memory`, which the pool keeps alive.
  static std::shared_ptr<HostBufferPool> Create(std::vector<uint8_t*> buffers, size_t bytes,
                                                std::shared_ptr<void> memory) {
    return std::shared_ptr<HostBufferPool>(new HostBufferPool(std::move(buffers), bytes, std::move(memory)));
  }

  // A free buffer, or an empty one when every buffer is lent out.
  Buffer Take() {
    MutexLock lock(mu_);
    if (free_.empty()) return Buffer();
    uint8_t* buffer = free_.back();
    free_.pop_back();
    return Buffer(buffer, GiveBack{shared_from_this()});
  }

  size_t bytes() const { return bytes_; }
  size_t size() const { return size_; }
  size_t free() const {
    MutexLock lock(mu_);
    return free_.size();
  }

 private:
  HostBufferPool(std::vector<uint8_t*> buffers, size_t bytes, std::shared_ptr<void> memory)
      : bytes_(bytes), size_(buffers.size()), memory_(std::move(memory)), free_(std::move(buffers)) {}

  void Return(uint8_t* buffer) {
    MutexLock lock(mu_);
    free_.push_back(buffer);
  }

  const size_t bytes_;
  const size_t size_;
  const std::shared_ptr<void> memory_;
  mutable Mutex mu_;
  std::vector<uint8_t*> free_ STOKER_GUARDED_BY(mu_);
};

}  // namespace stoker::client
