// HttpGet: a minimal HTTP/1.1 client for stoker's own admin endpoints (common/admin_server.h), with which tests
// read /metrics, /readyz and /state. IPv4 "host:port" only; the server
// closes each connection after its response, so the reply is everything read until then.
//
// Thread safety: free functions, no shared state.
#pragma once

#include <map>
#include <string>

#include "stoker/clock.h"
#include "stoker/status.h"

namespace stoker {

struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

// Sends `request` as is (for tests of malformed input) and reads the reply until the server closes.
StatusOr<HttpReply> HttpExchange(const std::string& address, const std::string& request, Duration timeout);
StatusOr<HttpReply> HttpGet(const std::string& address, const std::string& path, Duration timeout = Millis(5000));

// A TCP connection to 127.0.0.1:port that sends nothing until the caller closes the descriptor (-1 on failure):
// the idle connections an attacker holds open.
int OpenIdleConnection(uint16_t port);

// The value of the first sample in `address`'s /metrics whose line starts with `series` (a name, or a name with
// its labels as they are printed); NotFound if there is none.
StatusOr<double> ScrapeMetric(const std::string& address, const std::string& series);

// Scrapes until ScrapeMetric(address, series) >= at_least; DeadlineExceeded (saying the last value) after
// `timeout`. Polling is the only way to wait on another process's counter.
Status WaitForMetric(const std::string& address, const std::string& series, double at_least, Duration timeout);

// Polls `address`'s /readyz until it answers 200 (a restarted coordinator replays its journal first);
// DeadlineExceeded, saying the last answer, after `timeout`.
Status WaitForReady(const std::string& address, Duration timeout);

}  // namespace stoker
