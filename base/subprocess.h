// Subprocess: starts another program (the demo's coordinator and workers, the tests' processes) with its output
// sent to a file, signals it, and waits for it with a deadline. A Subprocess still running when destroyed is
// killed (SIGKILL) and reaped, so a failing test never leaves processes behind.
//
// Thread safety: none; one owner.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "stoker/status.h"

namespace stoker {

class Subprocess {
 public:
  Subprocess() = default;
  ~Subprocess();
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // argv[0] is the program path. stdout and stderr go to `log_path` (appended), or are inherited if empty; with
  // kStderr both go to this process's stderr.
  static constexpr char kStderr[] = "<stderr>";
  // `env` entries ("NAME=value") are added to this process's environment. `pass_fd`, if not -1, is open in the
  // child as kPassedFd (a Lifeline's child end, say); no other descriptor of this process is, unless it lacks
  // close-on-exec.
  static constexpr int kPassedFd = 3;
  static StatusOr<Subprocess> Start(const std::vector<std::string>& argv, const std::string& log_path = "",
                                    const std::vector<std::string>& env = {}, int pass_fd = -1);

  pid_t pid() const { return pid_; }
  // Readable once the process has exited (-1 if the kernel has no pidfd_open).
  int pidfd() const { return pidfd_; }
  bool running();
  void Signal(int signal);
  // Waits until the process exits or the timeout passes. Returns its exit code (128 + signal if killed by one),
  // or nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  // SIGKILL and reap.
  void Kill();
  // Forgets the process without signalling it: for a copy of this object in a child forked without exec, which must
  // not kill its parent's children.
  void Abandon();

 private:
  pid_t pid_ = -1;
  int pidfd_ = -1;
  std::optional<int> exit_code_;
};

// The directory holding the running executable (to find stoker-coordinator and stoker-worker beside `stoker`).
std::string ExecutableDirectory();

// Waits until the contents of `path` satisfy `ready` (checked whenever the file's directory changes), returning
// them; DeadlineExceeded after `timeout`. If `process` is given and exits first, fails at once with its exit code.
StatusOr<std::string> WaitForFileContent(const std::string& path, const std::function<bool(const std::string&)>& ready,
                                         std::chrono::milliseconds timeout, Subprocess* process = nullptr);

// Waits for `path` to exist and be non-empty (WaitForFileContent).
StatusOr<std::string> WaitForFile(const std::string& path, std::chrono::milliseconds timeout,
                                  Subprocess* process = nullptr);

}  // namespace stoker
