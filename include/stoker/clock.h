// Clock: the source of time for every timeout, lease and rate in stoker. Components take a Clock& instead of
// reading std::chrono directly so tests can drive lease expiry and heartbeats with a FakeClock, instantly and
// deterministically. Thread safety: Now() may be called from any thread; FakeClock::Advance too.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace stoker {

using Duration = std::chrono::nanoseconds;
using TimePoint = std::chrono::steady_clock::time_point;
using Millis = std::chrono::milliseconds;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
};

// The process's monotonic clock.
class RealClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
};

// A clock that moves only when told to. Starts at an arbitrary fixed point.
class FakeClock final : public Clock {
 public:
  TimePoint Now() const override { return TimePoint(Duration(now_ns_.load())); }
  void Advance(Duration d) { now_ns_.fetch_add(d.count()); }

 private:
  std::atomic<int64_t> now_ns_{int64_t{1'000'000'000'000}};
};

inline double ToSeconds(Duration d) { return std::chrono::duration<double>(d).count(); }
inline int64_t ToMillis(Duration d) { return std::chrono::duration_cast<Millis>(d).count(); }

// Wall-clock milliseconds since the Unix epoch, for records people read (manifests, summaries), never timeouts.
int64_t UnixMillisNow();

}  // namespace stoker
