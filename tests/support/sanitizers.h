// Which sanitizer a test binary is built with (scripts/sanitize.sh builds with clang, which answers through
// __has_feature; GCC defines __SANITIZE_ADDRESS__ and __SANITIZE_THREAD__), for the few tests whose bounds a
// sanitizer's runtime changes.
#pragma once

#include <cstdint>

#if defined(__SANITIZE_ADDRESS__)
#define STOKER_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STOKER_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define STOKER_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STOKER_TEST_TSAN 1
#endif
#endif

namespace stoker::testing {

#ifdef STOKER_TEST_ASAN
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#ifdef STOKER_TEST_TSAN
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif

// Memory AddressSanitizer keeps back after it is freed (its quarantine, 256 MiB by default) before reusing it: a
// process's resident memory can grow by this much more under ASan than without it.
inline constexpr uint64_t kSanitizerHeldBytes = kAddressSanitizer ? (256u << 20) : 0;

}  // namespace stoker::testing
