// ProgressLine: a live status line on stderr. On a terminal it rewrites one line in place; in a log (CI, a pipe)
// it prints a full line at most every `log_interval`, so long work shows progress without flooding the log.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace stoker::tools {

class ProgressLine {
 public:
  explicit ProgressLine(std::chrono::milliseconds log_interval = std::chrono::milliseconds(2000))
      : tty_(::isatty(STDERR_FILENO) == 1), log_interval_(log_interval) {}

  void Update(const std::string& text) {
    auto now = std::chrono::steady_clock::now();
    if (tty_) {
      std::fprintf(stderr, "\r%s\x1b[K", text.c_str());
      shown_ = true;
    } else if (now - last_ >= log_interval_) {
      std::fprintf(stderr, "%s\n", text.c_str());
      last_ = now;
    }
    std::fflush(stderr);
  }

  // Ends the in-place line so what follows starts on a fresh one.
  void Finish() {
    if (tty_ && shown_) std::fprintf(stderr, "\n");
    shown_ = false;
  }

  bool tty() const { return tty_; }

 private:
  bool tty_;
  bool shown_ = false;
  std::chrono::milliseconds log_interval_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace stoker::tools
