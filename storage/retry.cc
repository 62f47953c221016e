// The retry table and backoff (retry.h).
#include "storage/retry.h"

#include <algorithm>
#include <cstdlib>

namespace stoker::storage {

AttemptVerdict ClassifyAttempt(const StorageResponse& r) {
  switch (r.failure) {
    case TransportFailure::kTimeout: return {true, "timeout"};
    case TransportFailure::kConnect: return {true, "connect"};
    case TransportFailure::kReset: return {true, "reset"};
    case TransportFailure::kOther: return {true, "error"};
    case TransportFailure::kFatal: return {false, ""};
    case TransportFailure::kNone: break;
  }
  if (r.status == 429 || r.status == 503) return {true, "slow_down"};
  if (r.status == 408 || r.status == 500 || r.status == 502 || r.status == 504) return {true, "server_error"};
  return {false, ""};
}

Duration BackoffDelay(const RetryPolicy& policy, int attempt, uint64_t random, const std::string& retry_after) {
  const int shift = std::min(attempt, 20);
  const int64_t initial = std::max<int64_t>(1, policy.initial_backoff.count());
  const int64_t cap = std::min<int64_t>(policy.max_backoff.count(), initial << shift);
  Duration delay(cap <= 0 ? 0 : static_cast<int64_t>(random % static_cast<uint64_t>(cap + 1)));
  if (!retry_after.empty() && retry_after.size() < 6 &&
      retry_after.find_first_not_of("0123456789") == std::string::npos) {
    delay = std::max(delay, Duration(Millis(1000 * std::atoll(retry_after.c_str()))));
  }
  return std::min(delay, Duration(policy.max_backoff));
}

std::string StatusLabel(const StorageResponse& r) {
  switch (r.failure) {
    case TransportFailure::kTimeout: return "timeout";
    case TransportFailure::kConnect: return "connect";
    case TransportFailure::kReset: return "reset";
    case TransportFailure::kOther:
    case TransportFailure::kFatal: return "error";
    case TransportFailure::kNone: break;
  }
  switch (r.status) {
    case 200: case 204: case 206: case 304: case 400: case 401: case 403: case 404: case 408: case 412: case 416:
    case 429: case 500: case 502: case 503: case 504:
      return std::to_string(r.status);
    default: break;
  }
  if (r.status >= 100 && r.status < 600) return std::to_string(r.status / 100) + "xx";
  return "error";
}

}  // namespace stoker::storage
