// Logging: one line per message to stderr, "2026-11-21T12:00:00.123Z I coordinator] text". Each line is written
// with a single write so lines from different threads and processes do not interleave. A message is one line
// whatever it holds: control bytes (newlines, escape sequences: a peer's strings reach the log) are written as \xNN,
// so no peer can forge a line or move the terminal's cursor.
//
// The level and the component name are process-wide settings (set once in main, from --log-level and
// STOKER_LOG_LEVEL): logging is the one place stoker accepts process-wide state, like every logger does.
// Thread safety: all functions may be called from any thread.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace stoker {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Accepts debug|info|warning|error; returns false (and changes nothing) on anything else.
bool SetLogLevelFromString(std::string_view name);
void SetLogComponent(std::string_view component);

namespace internal {
// `text` with every byte below 0x20 or 0x7f written as \xNN: what a log line holds.
std::string EscapeControlBytes(std::string_view text);

class LogMessage {
 public:
  explicit LogMessage(LogLevel level) : level_(level) {}
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
}  // namespace internal

}  // namespace stoker

namespace stoker::internal {
// Turns the streamed expression into void so STOKER_LOG works as a statement, even under an unbraced if.
struct LogVoidify {
  void operator&(std::ostream&) {}
};
}  // namespace stoker::internal

#define STOKER_LOG(level)                                          \
  (::stoker::LogLevel::level < ::stoker::GetLogLevel())            \
      ? (void)0                                                    \
      : ::stoker::internal::LogVoidify() &                         \
            ::stoker::internal::LogMessage(::stoker::LogLevel::level).stream()
