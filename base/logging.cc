// Logging (logging.h): levels, the component name and the line format.
#include "base/logging.h"
#include "base/sync.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace stoker {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
Mutex g_component_mu;
std::string g_component STOKER_GUARDED_BY(g_component_mu) = "stoker";

char LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return 'D';
    case LogLevel::kInfo: return 'I';
    case LogLevel::kWarning: return 'W';
    case LogLevel::kError: return 'E';
  }
  return '?';
}
}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }

bool SetLogLevelFromString(std::string_view name) {
  if (name == "debug") SetLogLevel(LogLevel::kDebug);
  else if (name == "info") SetLogLevel(LogLevel::kInfo);
  else if (name == "warning" || name == "warn") SetLogLevel(LogLevel::kWarning);
  else if (name == "error") SetLogLevel(LogLevel::kError);
  else return false;
  return true;
}

void SetLogComponent(std::string_view component) {
  MutexLock lock(g_component_mu);
  g_component = std::string(component);
}

namespace internal {
std::string EscapeControlBytes(std::string_view text) {
  const auto is_control = [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; };
  if (std::none_of(text.begin(), text.end(), is_control)) return std::string(text);  // nearly every line
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    } else {
      out += c;
    }
  }
  return out;
}

LogMessage::~LogMessage() {
  auto now = std::chrono::system_clock::now();
  std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  int millis = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &utc);
  std::string component;
  {
    MutexLock lock(g_component_mu);
    component = g_component;
  }
  char prefix[96];
  int n = std::snprintf(prefix, sizeof(prefix), "%s.%03dZ %c %s] ", stamp, millis, LevelLetter(level_),
                        component.c_str());
  std::string line(prefix, n > 0 ? static_cast<size_t>(n) : 0);
  line += EscapeControlBytes(stream_.str());
  line += '\n';
  // One write(2) per line: atomic enough for lines shorter than PIPE_BUF, and never interleaved mid-line by us.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}
}  // namespace internal

}  // namespace stoker
