// StorageOptions: how stoker reaches object storage — the S3 endpoint, region and addressing style, credentials,
// connection pool, timeouts and retries — and the flags that set them (each with its STOKER_ twin), shared by
// stoker-worker and `stoker index`. The standard AWS variables are honoured after the flags: AWS_ENDPOINT_URL_S3 /
// AWS_ENDPOINT_URL, AWS_REGION / AWS_DEFAULT_REGION, AWS_PROFILE, AWS_SHARED_CREDENTIALS_FILE, and the credentials
// themselves (storage/credentials.h), which have no flag: a flag would put a secret in `ps` and in the pod spec.
//
// Thread safety: values; StorageFlags is used from one thread at start-up.
#pragma once

#include <cstdint>
#include <string>

#include "base/flags.h"
#include "storage/credentials.h"
#include "storage/retry.h"

namespace stoker::storage {

enum class S3Addressing { kPath, kVirtualHost };

struct StorageOptions {
  std::string s3_endpoint;  // scheme://host[:port]; empty: AWS (https://s3.REGION.amazonaws.com)
  std::string s3_region = "us-east-1";
  S3Addressing s3_addressing = S3Addressing::kVirtualHost;
  S3Credentials credentials;
  size_t max_connections = 64;
  Duration connect_timeout = Millis(5000);
  Duration request_timeout = Millis(30000);  // one try
  RetryPolicy retry;                         // retry.deadline bounds all tries of one read
  bool verify_tls = true;
  std::string ca_file;
};

class StorageFlags {
 public:
  void Register(FlagSet& flags);
  // The options from the parsed flags and the environment (credentials included). InvalidArgument for a bad value.
  StatusOr<StorageOptions> Resolve(const GetEnvFunction& getenv) const;

 private:
  std::string endpoint_, region_, addressing_ = "auto", credentials_file_, profile_, ca_file_;
  std::string connect_timeout_ = "5s", request_timeout_ = "30s", retry_deadline_ = "60s";
  std::string initial_backoff_ = "50ms", max_backoff_ = "2s";
  uint32_t connections_ = 64;
  bool insecure_tls_ = false;
};

}  // namespace stoker::storage
