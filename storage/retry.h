// Which failed exchanges with object storage are worth trying again, and how long to wait before the next try.
// The table (docs/design.md, "Storage"):
//   retried:     no connection, connection reset or closed mid-body, timeout (any phase), HTTP 408, 429, 500, 502,
//                503 (S3's SlowDown), 504;
//   not retried: 403/401 (credentials or policy), 404 (no such object), 412 and an ETag other than the indexed one
//                (the object changed), 416, any other 4xx, 3xx (redirects are not followed), a 2xx body longer
//                than asked for.
// Backoff is "full jitter" (a uniform delay in [0, min(max, initial x 2^attempt)]), at least the server's
// Retry-After when it sends one, and every try ends within the read's deadline.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "stoker/clock.h"
#include "storage/http_transport.h"

namespace stoker::storage {

struct RetryPolicy {
  Duration initial_backoff = Millis(50);
  Duration max_backoff = Millis(2000);
  Duration deadline = Millis(60000);  // all tries of one operation
};

struct AttemptVerdict {
  bool retry = false;
  std::string reason;  // for the retries metric: timeout, connect, reset, error, slow_down, server_error
};

AttemptVerdict ClassifyAttempt(const StorageResponse& response);

// The wait before try number `attempt` + 1 (attempt counts from 0), given a uniformly random 64-bit `random`.
Duration BackoffDelay(const RetryPolicy& policy, int attempt, uint64_t random, const std::string& retry_after);

// The metric label for an exchange's outcome: the status code for common ones ("206", "503"), its class for
// others ("4xx"), or the transport failure ("timeout", "connect", "reset", "error"). A small fixed set.
std::string StatusLabel(const StorageResponse& response);

}  // namespace stoker::storage
