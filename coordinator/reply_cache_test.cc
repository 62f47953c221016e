// ReplyCache: retries are found per sender; senders, replies and bytes stay under their caps.
#include "coordinator/reply_cache.h"

#include <gtest/gtest.h>

namespace stoker::coordinator {
namespace {

TimePoint At(int64_t ms) { return TimePoint{} + Millis(ms); }

TEST(ReplyCache, FindsARetryOfItsOwnSenderOnly) {
  ReplyCache cache({});
  cache.Remember("worker:a/w-1", 7, "reply-7", At(0));
  ASSERT_NE(cache.Find("worker:a/w-1", 7, At(1)), nullptr);
  EXPECT_EQ(*cache.Find("worker:a/w-1", 7, At(1)), "reply-7");
  EXPECT_EQ(cache.Find("worker:b/w-1", 7, At(1)), nullptr);
  EXPECT_EQ(cache.Find("worker:a/w-1", 8, At(1)), nullptr);
}

// Regression: the cache was capped by senders only; large lease replies under 4096 sender ids grew the
// coordinator from 128 to 370 MB in 55 s, with a bound of about 20 GiB. Bytes are capped too.
TEST(ReplyCache, StaysUnderItsByteCapDroppingTheLeastRecentlyUsedSenders) {
  ReplyCache cache({.replies_per_sender = 8, .max_senders = 4096, .max_bytes = 10000});
  const std::string big(3000, 'x');
  for (int i = 0; i < 100; ++i) {
    cache.Remember("worker:a/w-" + std::to_string(i), 1, big, At(i));
    EXPECT_LE(cache.bytes(), 10000u);
  }
  EXPECT_EQ(cache.senders(), 3u);
  EXPECT_EQ(cache.evictions(), 97u);
  EXPECT_NE(cache.Find("worker:a/w-99", 1, At(100)), nullptr);  // the newest are kept
  EXPECT_EQ(cache.Find("worker:a/w-0", 1, At(100)), nullptr);
}

TEST(ReplyCache, OneSendersRepliesAlsoStayUnderTheByteCap) {
  ReplyCache cache({.replies_per_sender = 8, .max_senders = 4096, .max_bytes = 10000});
  for (uint64_t id = 0; id < 8; ++id) cache.Remember("worker:a/w-1", id, std::string(3000, 'x'), At(0));
  EXPECT_LE(cache.bytes(), 10000u);
  EXPECT_NE(cache.Find("worker:a/w-1", 7, At(1)), nullptr);
  cache.Remember("worker:a/w-1", 9, std::string(20000, 'x'), At(2));  // larger than the cap alone: not kept
  EXPECT_EQ(cache.Find("worker:a/w-1", 9, At(3)), nullptr);
  EXPECT_LE(cache.bytes(), 10000u);
}

TEST(ReplyCache, CapsSendersAndRepliesPerSenderAndForgetsIdleOnes) {
  ReplyCache cache({.replies_per_sender = 2, .max_senders = 2, .max_bytes = 1 << 20});
  cache.Remember("s1", 1, "a", At(0));
  cache.Remember("s1", 2, "b", At(0));
  cache.Remember("s1", 3, "c", At(0));
  EXPECT_EQ(cache.Find("s1", 1, At(1)), nullptr);  // only the last two
  cache.Remember("s2", 1, "a", At(2));
  cache.Remember("s3", 1, "a", At(3));  // s1 was used least recently
  EXPECT_EQ(cache.senders(), 2u);
  EXPECT_EQ(cache.Find("s1", 3, At(4)), nullptr);
  cache.ForgetIdle(At(100), Millis(50));
  EXPECT_EQ(cache.senders(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
}

}  // namespace
}  // namespace stoker::coordinator
