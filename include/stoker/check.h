// STOKER_CHECK: a bug check. It aborts with the file, line, condition and a message when an invariant of stoker's
// own code is broken. It is never used to validate input: bad input from files, flags or the network is returned
// as a Status (InvalidArgument, DataLoss, ...) instead. Active in every build type.
#pragma once

#include <string_view>

namespace stoker::internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* condition, std::string_view message);
}  // namespace stoker::internal

#define STOKER_CHECK(condition, ...)                                                              \
  do {                                                                                            \
    if (!(condition)) [[unlikely]] {                                                              \
      ::stoker::internal::CheckFailed(__FILE__, __LINE__, #condition, ::std::string_view{__VA_ARGS__}); \
    }                                                                                             \
  } while (0)
