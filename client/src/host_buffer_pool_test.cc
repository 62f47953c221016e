// HostBufferPool on its own: buffers lent one at a time until none is left, returned from any thread, and the
// memory they lend alive for as long as any buffer is.
#include "client/src/host_buffer_pool.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

namespace stoker::client {
namespace {

struct Memory {
  explicit Memory(bool* freed_flag) : freed(freed_flag) {}
  ~Memory() { *freed = true; }
  bool* freed;
  uint8_t bytes[4 * 64] = {};
};

std::shared_ptr<HostBufferPool> PoolOf(bool* freed, size_t buffers = 4) {
  auto memory = std::make_shared<Memory>(freed);
  std::vector<uint8_t*> addresses;
  for (size_t i = 0; i < buffers; ++i) addresses.push_back(memory->bytes + i * 64);
  return HostBufferPool::Create(std::move(addresses), 64, memory);
}

TEST(HostBufferPool, LendsEachBufferOnceUntilNoneIsLeft) {
  bool freed = false;
  auto pool = PoolOf(&freed);
  std::vector<HostBufferPool::Buffer> taken;
  std::set<uint8_t*> distinct;
  for (int i = 0; i < 4; ++i) {
    taken.push_back(pool->Take());
    ASSERT_TRUE(taken.back());
    distinct.insert(taken.back().get());
  }
  EXPECT_EQ(distinct.size(), 4u);
  EXPECT_FALSE(pool->Take()) << "every buffer is lent: none more";
  EXPECT_EQ(pool->free(), 0u);
  uint8_t* const returned = taken[2].get();
  taken[2].reset();
  EXPECT_EQ(pool->free(), 1u);
  HostBufferPool::Buffer again = pool->Take();
  EXPECT_EQ(again.get(), returned);
}

TEST(HostBufferPool, ABufferReturnedOnAnotherThreadIsLentAgain) {
  bool freed = false;
  auto pool = PoolOf(&freed, 1);
  HostBufferPool::Buffer b = pool->Take();
  ASSERT_TRUE(b);
  std::thread([b = std::move(b)]() mutable { b.reset(); }).join();
  EXPECT_TRUE(pool->Take());
}

TEST(HostBufferPool, ItsMemoryLivesAsLongAsAnyBuffer) {
  bool freed = false;
  auto pool = PoolOf(&freed);
  HostBufferPool::Buffer held = pool->Take();
  pool.reset();
  EXPECT_FALSE(freed) << "a buffer is still held";
  held.get()[63] = 1;  // still writable
  held.reset();
  EXPECT_TRUE(freed);
}

}  // namespace
}  // namespace stoker::client
