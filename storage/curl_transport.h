// CurlTransport: HttpTransport over libcurl (Debian's libcurl4-openssl). A pool of at most `max_connections` easy
// handles, each keeping its connection alive between requests (curl_easy_reset keeps the connection and DNS caches),
// so a worker holds at most that many connections to storage. A request that finds every handle busy waits for one
// within its own timeout. S3 requests are signed by libcurl itself (CURLOPT_AWS_SIGV4). Redirects are not
// followed; only http and https are allowed; nothing is ever logged (no CURLOPT_VERBOSE: it would print headers).
//
// Thread safety: Perform may be called from any number of threads.
#pragma once

#include <memory>
#include <vector>

#include "base/sync.h"
#include "storage/http_transport.h"

namespace stoker::storage {

struct CurlOptions {
  size_t max_connections = 16;
  bool verify_tls = true;
  std::string ca_file;  // empty: the system's bundle
};

class CurlTransport final : public HttpTransport {
 public:
  explicit CurlTransport(const CurlOptions& options);
  ~CurlTransport() override;
  CurlTransport(const CurlTransport&) = delete;
  CurlTransport& operator=(const CurlTransport&) = delete;

  StorageResponse Perform(const StorageRequest& request) override;

 private:
  void* Acquire(TimePoint deadline);
  void Release(void* handle);

  const CurlOptions options_;
  Mutex mu_;
  CondVar released_;
  std::vector<void*> idle_ STOKER_GUARDED_BY(mu_);  // CURL* ready for reuse (their connections kept alive)
  size_t created_ STOKER_GUARDED_BY(mu_) = 0;
};

}  // namespace stoker::storage
