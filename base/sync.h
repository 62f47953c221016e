// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with clang's thread-safety annotations, so
// that "this field is guarded by that mutex" is a declaration the compiler checks (`-Wthread-safety`, one CI step:
// scripts/check-thread-safety.sh) rather than a comment. The macros compile to nothing under GCC.
//
//   mutable Mutex mu_;
//   uint64_t count_ STOKER_GUARDED_BY(mu_) = 0;
//   void Add() { MutexLock lock(mu_); ++count_; }
//   void TakeWhenReady() {
//     MutexLock lock(mu_);
//     ready_.Wait(mu_, [&] { mu_.AssertHeld(); return count_ > 0; });
//   }
//
// A predicate lambda runs with the mutex held but clang cannot see that through the lambda; its first statement
// is `mu.AssertHeld()` (free at run time). Waits with a timeout measure real time: a component's own Clock (a
// FakeClock in tests) measures what it reports, the condition variable only bounds the sleep.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define STOKER_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define STOKER_THREAD_ANNOTATION(x)
#endif

#define STOKER_CAPABILITY(x) STOKER_THREAD_ANNOTATION(capability(x))
#define STOKER_SCOPED_CAPABILITY STOKER_THREAD_ANNOTATION(scoped_lockable)
#define STOKER_GUARDED_BY(x) STOKER_THREAD_ANNOTATION(guarded_by(x))
#define STOKER_PT_GUARDED_BY(x) STOKER_THREAD_ANNOTATION(pt_guarded_by(x))
#define STOKER_REQUIRES(...) STOKER_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define STOKER_EXCLUDES(...) STOKER_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define STOKER_ACQUIRE(...) STOKER_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define STOKER_RELEASE(...) STOKER_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define STOKER_ASSERT_CAPABILITY(x) STOKER_THREAD_ANNOTATION(assert_capability(x))
#define STOKER_NO_THREAD_SAFETY_ANALYSIS STOKER_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace stoker {

class CondVar;

// A std::mutex the analysis knows about. Not recursive.
class STOKER_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() STOKER_ACQUIRE() { mu_.lock(); }
  void Unlock() STOKER_RELEASE() { mu_.unlock(); }
  // Tells the analysis the caller holds the mutex (inside a predicate lambda run under it). Checks nothing.
  void AssertHeld() const STOKER_ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope; Unlock()/Lock() let a scope drop it around slow work and take it back.
class STOKER_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) STOKER_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() STOKER_RELEASE() {
    if (held_) mu_.Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() STOKER_RELEASE() {
    held_ = false;
    mu_.Unlock();
  }
  void Lock() STOKER_ACQUIRE() {
    mu_.Lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

// A condition variable waited on with a Mutex held.
class CondVar {
 public:
  void Wait(Mutex& mu) STOKER_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // the caller still holds the mutex
  }
  template <typename Predicate>
  void Wait(Mutex& mu, Predicate ready) STOKER_REQUIRES(mu) {
    while (!ready()) Wait(mu);
  }
  // Waits for a notification or `deadline` (steady clock), whichever comes first; the caller looks again.
  void WaitUntil(Mutex& mu, std::chrono::steady_clock::time_point deadline) STOKER_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait_until(lock, deadline);
    lock.release();
  }
  // Waits until `ready` or `deadline` (steady clock); returns ready().
  template <typename Predicate>
  bool WaitUntil(Mutex& mu, std::chrono::steady_clock::time_point deadline, Predicate ready) STOKER_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    bool result = cv_.wait_until(lock, deadline, ready);
    lock.release();
    return result;
  }
  // Waits until `ready` or for at most `timeout` of real time (duration::max(): no limit); returns ready().
  template <typename Rep, typename Period, typename Predicate>
  bool WaitFor(Mutex& mu, std::chrono::duration<Rep, Period> timeout, Predicate ready) STOKER_REQUIRES(mu) {
    if (timeout == std::chrono::duration<Rep, Period>::max()) {
      Wait(mu, ready);
      return true;
    }
    return WaitUntil(mu, std::chrono::steady_clock::now() + timeout, ready);
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace stoker
