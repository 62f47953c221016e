// Lifeline: a child process that ends when the process that started it ends, however that ends (exit, crash,
// SIGKILL). The parent holds the write end of a pipe and gives the child the read end (Subprocess::Start's
// `inherit`); the child watches it (WatchLifeline) and exits at once when it reads end-of-file, which the kernel
// delivers as soon as every copy of the write end is closed. stoker's local mode starts its coordinator and workers
// this way, so that a trainer killed with SIGKILL leaves no process behind.
//
// The write end is close-on-exec: programs the parent starts later do not hold it. A child the parent forks without
// exec (Python's multiprocessing "fork") holds a copy, and the lifeline ends when that child ends too.
//
// Thread safety: a Lifeline has one owner; WatchLifeline is called once, at start-up.
#pragma once

#include "stoker/status.h"

namespace stoker {

class Lifeline {
 public:
  static StatusOr<Lifeline> Make();
  Lifeline() = default;
  ~Lifeline();
  Lifeline(Lifeline&& other) noexcept;
  Lifeline& operator=(Lifeline&& other) noexcept;
  Lifeline(const Lifeline&) = delete;
  Lifeline& operator=(const Lifeline&) = delete;

  // The read end, to be given to a child (close-on-exec here: Subprocess::Start duplicates it into the child).
  int child_end() const { return read_; }
  // Closes the write end: every child watching this lifeline exits.
  void Cut();

 private:
  int read_ = -1;
  int write_ = -1;
};

// In the child: a thread that waits on `fd` and, at end-of-file (the parent is gone), logs it and ends this process
// at once with exit code 0 (no destructors: nothing of a local-mode server outlives its trainer). InvalidArgument if
// `fd` is not an open pipe.
Status WatchLifeline(int fd);

}  // namespace stoker
