// The log line's one-line promise: whatever a message holds (a peer's strings reach the log), it is one line, with
// control bytes written as \xNN.
#include "base/logging.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace stoker {
namespace {

TEST(Logging, ControlBytesAreWrittenAsHex) {
  EXPECT_EQ(internal::EscapeControlBytes("plain text: 100 % ok \\ / \"q\""), "plain text: 100 % ok \\ / \"q\"");
  EXPECT_EQ(internal::EscapeControlBytes(std::string("a\nb\rc\td\x1b[2Je\x7f", 13) + std::string(1, '\0')),
            "a\\x0ab\\x0dc\\x09d\\x1b[2Je\\x7f\\x00");
  EXPECT_EQ(internal::EscapeControlBytes("caf\xc3\xa9"), "caf\xc3\xa9");  // UTF-8 stays as it is
}

TEST(Logging, AMessageCannotForgeALine) {
  std::FILE* capture = std::tmpfile();
  ASSERT_NE(capture, nullptr);
  const int saved = ::dup(STDERR_FILENO);
  ASSERT_GE(saved, 0);
  ASSERT_GE(::dup2(::fileno(capture), STDERR_FILENO), 0);
  STOKER_LOG(kWarning) << "sample 7 quarantined (decode_error): bad\n2026-11-27T00:00:00.000Z E coordinator] forged";
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::rewind(capture);
  std::string text;
  char buffer[512];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), capture)) > 0;) text.append(buffer, n);
  std::fclose(capture);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_NE(text.find("bad\\x0a2026-11-27T00:00:00.000Z E coordinator] forged\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace stoker
