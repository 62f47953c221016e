// HttpTransport: one HTTP exchange, the seam between stoker's object-store logic (signing choices, retries, status
// mapping; object_store.h) and the library that speaks HTTP (libcurl; curl_transport.h). Tests put a fake here to
// script 503s, resets and short bodies without a network. A transport does no retries and never throws: every
// failure is in the StorageResponse.
//
// Thread safety: Perform may be called concurrently; implementations bound how many run at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/clock.h"
#include "storage/credentials.h"

namespace stoker::storage {

// How an exchange failed below HTTP (no status line, or a body cut short).
// kFatal: trying again cannot help (TLS verification, a malformed URL, an unsupported protocol).
enum class TransportFailure { kNone, kTimeout, kConnect, kReset, kOther, kFatal };

struct StorageRequest {
  std::string method = "GET";         // GET, HEAD or PUT
  std::string url;                    // fully encoded
  std::vector<std::string> headers;   // "Name: value"
  std::optional<std::pair<uint64_t, uint64_t>> range;  // bytes=first-last (inclusive)
  std::string aws_sigv4;              // "aws:amz:REGION:s3" to sign with `credentials`; empty: unsigned
  const S3Credentials* credentials = nullptr;
  std::string_view upload;            // PUT body
  Duration timeout = Millis(30000);   // the whole exchange, connection included
  Duration connect_timeout = Millis(5000);
  // A 2xx body goes to `out` (at most out_capacity bytes; more is an overflow) when set, else to
  // StorageResponse::body (at most max_body bytes). Non-2xx bodies always go to StorageResponse::body, cut at 64 KiB.
  uint8_t* out = nullptr;
  size_t out_capacity = 0;
  size_t max_body = 64 << 10;
};

struct StorageResponse {
  TransportFailure failure = TransportFailure::kNone;
  std::string failure_detail;  // the library's words (no header values, no credentials)
  long status = 0;             // 0 when failure != kNone before a status line arrived
  std::string etag;
  std::string retry_after;     // the Retry-After header, if any
  int64_t content_length = -1;
  std::string body;
  size_t out_bytes = 0;        // bytes written to StorageRequest::out
  bool overflow = false;       // the body was larger than the buffer it was meant for
  Duration elapsed{0};
};

class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
  virtual StorageResponse Perform(const StorageRequest& request) = 0;
};

}  // namespace stoker::storage
