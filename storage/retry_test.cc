// The retry table and the backoff's bounds.
#include "storage/retry.h"

#include <gtest/gtest.h>

namespace stoker::storage {
namespace {

StorageResponse Response(long status) {
  StorageResponse r;
  r.status = status;
  return r;
}

StorageResponse Failure(TransportFailure f) {
  StorageResponse r;
  r.failure = f;
  return r;
}

TEST(Retry, TheTable) {
  for (long s : {408L, 429L, 500L, 502L, 503L, 504L}) EXPECT_TRUE(ClassifyAttempt(Response(s)).retry) << s;
  for (long s : {200L, 206L, 301L, 400L, 401L, 403L, 404L, 412L, 416L}) EXPECT_FALSE(ClassifyAttempt(Response(s)).retry) << s;
  EXPECT_EQ(ClassifyAttempt(Response(503)).reason, "slow_down");
  for (auto f : {TransportFailure::kTimeout, TransportFailure::kConnect, TransportFailure::kReset,
                 TransportFailure::kOther}) {
    EXPECT_TRUE(ClassifyAttempt(Failure(f)).retry);
  }
  EXPECT_FALSE(ClassifyAttempt(Failure(TransportFailure::kFatal)).retry);
}

TEST(Retry, BackoffIsJitteredAndBounded) {
  RetryPolicy p;
  p.initial_backoff = Millis(100);
  p.max_backoff = Millis(1000);
  for (int attempt = 0; attempt < 40; ++attempt) {
    for (uint64_t r : {0ull, 1ull, 12345678901ull, ~0ull}) {
      Duration d = BackoffDelay(p, attempt, r, "");
      EXPECT_GE(d.count(), 0);
      EXPECT_LE(d, Duration(Millis(std::min<int64_t>(1000, int64_t{100} << std::min(attempt, 20)))));
    }
  }
  EXPECT_EQ(BackoffDelay(p, 0, 0, "1"), Duration(Millis(1000)));       // Retry-After, capped by max_backoff
  EXPECT_LE(BackoffDelay(p, 0, 0, "garbage"), Duration(Millis(100)));  // ignored
}

TEST(Retry, StatusLabelsAreAFixedSet) {
  EXPECT_EQ(StatusLabel(Response(206)), "206");
  EXPECT_EQ(StatusLabel(Response(418)), "4xx");
  EXPECT_EQ(StatusLabel(Response(999)), "error");
  EXPECT_EQ(StatusLabel(Failure(TransportFailure::kReset)), "reset");
}

}  // namespace
}  // namespace stoker::storage
