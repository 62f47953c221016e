// StorageFlags (options.h): flags, then the standard AWS environment, then defaults.
#include "storage/options.h"

namespace stoker::storage {
namespace {

std::string FirstSet(const GetEnvFunction& getenv, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* v = getenv(name);
    if (v != nullptr && *v != '\0') return v;
  }
  return "";
}

StatusOr<Duration> DurationFlag(const std::string& name, const std::string& text) {
  auto ms = ParseDurationMs(text);
  if (!ms.ok()) return ms.status().WithContext("--" + name);
  if (*ms <= 0) return InvalidArgumentError("--" + name + " must be positive");
  return Duration(Millis(*ms));
}

}  // namespace

void StorageFlags::Register(FlagSet& flags) {
  flags.AddString("s3-endpoint", &endpoint_,
                  "S3-compatible endpoint, scheme://host[:port] (default: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, "
                  "else AWS)");
  flags.AddString("s3-region", &region_, "S3 region for signing (default: $AWS_REGION, $AWS_DEFAULT_REGION, us-east-1)");
  flags.AddString("s3-addressing", &addressing_,
                  "path (endpoint/bucket/key), virtual (bucket.endpoint/key) or auto (path with --s3-endpoint, "
                  "virtual on AWS)");
  flags.AddString("s3-credentials-file", &credentials_file_,
                  "AWS shared-credentials file, read when $AWS_ACCESS_KEY_ID is unset (default: "
                  "$AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials)");
  flags.AddString("s3-profile", &profile_, "profile in the credentials file (default: $AWS_PROFILE, default)");
  flags.AddUint32("storage-connections", &connections_, "most connections to object storage held at once");
  flags.AddString("storage-connect-timeout", &connect_timeout_, "time to connect to object storage, per try");
  flags.AddString("storage-request-timeout", &request_timeout_, "time for one request to object storage, per try");
  flags.AddString("storage-retry-deadline", &retry_deadline_,
                  "time for all tries of one read; past it the read fails (its unit is handed back)");
  flags.AddString("storage-initial-backoff", &initial_backoff_, "first retry backoff (full jitter, doubling)");
  flags.AddString("storage-max-backoff", &max_backoff_, "longest retry backoff");
  flags.AddString("storage-ca-file", &ca_file_, "CA bundle for https endpoints (default: the system's)");
  flags.AddBool("storage-insecure-tls", &insecure_tls_, "do not verify TLS certificates (test endpoints only)");
}

StatusOr<StorageOptions> StorageFlags::Resolve(const GetEnvFunction& getenv) const {
  StorageOptions o;
  o.s3_endpoint = !endpoint_.empty() ? endpoint_ : FirstSet(getenv, {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"});
  while (!o.s3_endpoint.empty() && o.s3_endpoint.back() == '/') o.s3_endpoint.pop_back();
  if (!o.s3_endpoint.empty() && !o.s3_endpoint.starts_with("http://") && !o.s3_endpoint.starts_with("https://")) {
    return InvalidArgumentError("--s3-endpoint must start with http:// or https://");
  }
  o.s3_region = !region_.empty() ? region_ : FirstSet(getenv, {"AWS_REGION", "AWS_DEFAULT_REGION"});
  if (o.s3_region.empty()) o.s3_region = "us-east-1";
  if (addressing_ == "path") {
    o.s3_addressing = S3Addressing::kPath;
  } else if (addressing_ == "virtual") {
    o.s3_addressing = S3Addressing::kVirtualHost;
  } else if (addressing_ == "auto") {
    o.s3_addressing = o.s3_endpoint.empty() ? S3Addressing::kVirtualHost : S3Addressing::kPath;
  } else {
    return InvalidArgumentError("--s3-addressing must be path, virtual or auto, not '" + addressing_ + "'");
  }
  STOKER_ASSIGN_OR_RETURN(o.credentials, LoadS3Credentials(getenv, credentials_file_, profile_));
  if (connections_ == 0) return InvalidArgumentError("--storage-connections must be at least 1");
  o.max_connections = connections_;
  STOKER_ASSIGN_OR_RETURN(o.connect_timeout, DurationFlag("storage-connect-timeout", connect_timeout_));
  STOKER_ASSIGN_OR_RETURN(o.request_timeout, DurationFlag("storage-request-timeout", request_timeout_));
  STOKER_ASSIGN_OR_RETURN(o.retry.deadline, DurationFlag("storage-retry-deadline", retry_deadline_));
  STOKER_ASSIGN_OR_RETURN(o.retry.initial_backoff, DurationFlag("storage-initial-backoff", initial_backoff_));
  STOKER_ASSIGN_OR_RETURN(o.retry.max_backoff, DurationFlag("storage-max-backoff", max_backoff_));
  o.verify_tls = !insecure_tls_;
  o.ca_file = ca_file_;
  return o;
}

}  // namespace stoker::storage
