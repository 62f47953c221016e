// HttpObjectStore (object_store.h): S3 and plain HTTP by range over an HttpTransport, with retries and status
// mapping. Messages name the object, the HTTP status and S3's error code; never a header value or a credential.
#include "storage/object_store.h"

#include <algorithm>
#include <random>

#include "storage/curl_transport.h"
#include "storage/s3_xml.h"

namespace stoker::storage {
namespace {

constexpr char kEmptyPayloadSha256[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr size_t kMaxListBytes = 64 << 20;
constexpr size_t kMaxListPages = 100000;

uint64_t Random64() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

// "HTTP 503 SlowDown: Please reduce your request rate." or the transport's words.
std::string Describe(const StorageResponse& r) {
  if (r.failure != TransportFailure::kNone) return r.failure_detail;
  std::string text = "HTTP " + std::to_string(r.status);
  S3Error error = ParseS3Error(r.body);
  if (!error.code.empty()) text += " " + error.code;
  if (!error.message.empty()) text += ": " + error.message;
  return text;
}

std::string Seconds(Duration d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", ToSeconds(d));
  return text;
}

}  // namespace

HttpObjectStore::HttpObjectStore(StorageOptions options, std::unique_ptr<HttpTransport> transport,
                                 StorageStats* stats)
    : options_(std::move(options)), transport_(std::move(transport)), stats_(stats) {}

std::unique_ptr<HttpObjectStore> MakeObjectStore(const StorageOptions& options, StorageStats* stats) {
  CurlOptions curl;
  curl.max_connections = options.max_connections;
  curl.verify_tls = options.verify_tls;
  curl.ca_file = options.ca_file;
  return std::make_unique<HttpObjectStore>(options, std::make_unique<CurlTransport>(curl), stats);
}

void HttpObjectStore::Shutdown() {
  MutexLock lock(mu_);
  shutdown_ = true;
  wake_.NotifyAll();
}

bool HttpObjectStore::SleepUnlessShutdown(Duration d) {
  MutexLock lock(mu_);
  const auto until = std::chrono::steady_clock::now() + d;
  wake_.WaitUntil(mu_, until, [this] {
    mu_.AssertHeld();
    return shutdown_;
  });
  return !shutdown_;
}

std::string HttpObjectStore::RequestUrl(const ObjectUrl& url, const std::string& query) const {
  std::string base;
  if (!url.s3()) {
    base = url.ToString();
  } else {
    std::string endpoint = options_.s3_endpoint.empty() ? "https://s3." + options_.s3_region + ".amazonaws.com"
                                                        : options_.s3_endpoint;
    const std::string key = UriEncode(url.key, /*keep_slash=*/true);
    if (options_.s3_addressing == S3Addressing::kPath) {
      // The bucket itself is /bucket, not /bucket/: S3-compatible servers sign the path they normalised.
      base = endpoint + "/" + url.bucket + (key.empty() ? "" : "/" + key);
    } else {
      const size_t scheme_end = endpoint.find("://") + 3;
      base = endpoint.substr(0, scheme_end) + url.bucket + "." + endpoint.substr(scheme_end) + "/" + key;
    }
  }
  return query.empty() ? base : base + "?" + query;
}

StatusOr<StorageRequest> HttpObjectStore::NewRequest(const std::string& method, const std::string& url,
                                                  const std::string& query) {
  STOKER_ASSIGN_OR_RETURN(ObjectUrl parsed, ParseObjectUrl(url));
  StorageRequest r;
  r.method = method;
  r.url = RequestUrl(parsed, query);
  r.timeout = options_.request_timeout;
  r.connect_timeout = options_.connect_timeout;
  if (parsed.s3() && !options_.credentials.anonymous()) {
    r.aws_sigv4 = "aws:amz:" + options_.s3_region + ":s3";
    r.credentials = &options_.credentials;
    r.headers.push_back(std::string("x-amz-content-sha256: ") +
                        (method == "PUT" ? "UNSIGNED-PAYLOAD" : kEmptyPayloadSha256));
    if (!options_.credentials.session_token.empty()) {
      r.headers.push_back("x-amz-security-token: " + options_.credentials.session_token.reveal());
    }
  }
  return r;
}

StatusOr<StorageResponse> HttpObjectStore::Execute(const StorageRequest& request, const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + options_.retry.deadline;
  for (int attempt = 0;; ++attempt) {
    StorageRequest r = request;
    const Duration left = deadline - std::chrono::steady_clock::now();
    r.timeout = std::max<Duration>(Millis(1), std::min<Duration>(options_.request_timeout, left));
    StorageResponse response = transport_->Perform(r);
    if (stats_ != nullptr) stats_->Exchanged(response);
    const AttemptVerdict verdict = ClassifyAttempt(response);
    if (!verdict.retry) return response;
    const Duration delay = BackoffDelay(options_.retry, attempt, Random64(), response.retry_after);
    if (std::chrono::steady_clock::now() + delay >= deadline) {
      if (stats_ != nullptr) stats_->Failed("unavailable");
      return UnavailableError(what + ": gave up after " + std::to_string(attempt + 1) + " tries in " +
                              Seconds(std::chrono::steady_clock::now() - start) + " (last: " + Describe(response) +
                              ")");
    }
    if (stats_ != nullptr) stats_->Retried(verdict.reason);
    if (!SleepUnlessShutdown(delay)) return CancelledError(what + ": shutting down");
  }
}

Status HttpObjectStore::ResponseError(const StorageResponse& r, const std::string& what) {
  auto fail = [this](const char* reason, Status status) {
    if (stats_ != nullptr) stats_->Failed(reason);
    return status;
  };
  const std::string described = Describe(r);
  if (r.failure != TransportFailure::kNone) return fail("unavailable", UnavailableError(what + ": " + described));
  if (r.status == 404) return fail("not_found", NotFoundError(what + ": not found (" + described + ")"));
  if (r.status == 401 || r.status == 403) {
    return fail("permission_denied",
                PermissionDeniedError(what + ": access denied (" + described + "); check the credentials (from " +
                                      options_.credentials.source + "), the region and the bucket's policy"));
  }
  if (r.status == 412) {
    return fail("changed", FailedPreconditionError(what + ": changed since `stoker index` (" + described +
                                                   " on If-Match): index the dataset again"));
  }
  if (r.status >= 300 && r.status < 400) {
    return fail("redirected", FailedPreconditionError(what + ": redirected (" + described +
                                                      "); for S3 check --s3-region and --s3-addressing"));
  }
  if (r.status == 416) return fail("out_of_range", OutOfRangeError(what + ": range not satisfiable (" + described + ")"));
  return fail("http_error", UnavailableError(what + ": " + described));
}

StatusOr<ObjectInfo> HttpObjectStore::Stat(const std::string& url) {
  STOKER_ASSIGN_OR_RETURN(StorageRequest request, NewRequest("HEAD", url));
  STOKER_ASSIGN_OR_RETURN(StorageResponse r, Execute(request, url));
  if (r.status != 200) return ResponseError(r, url);
  if (r.content_length < 0) return DataLossError(url + ": the server sent no Content-Length");
  return ObjectInfo{url, static_cast<uint64_t>(r.content_length), r.etag};
}

Status HttpObjectStore::ReadRange(const std::string& url, uint64_t offset, size_t n, const std::string& expected_etag,
                                  uint8_t* out) {
  if (n == 0) return Status::Ok();
  STOKER_ASSIGN_OR_RETURN(StorageRequest request, NewRequest("GET", url));
  request.range = std::make_pair(offset, offset + n - 1);
  request.out = out;
  request.out_capacity = n;
  if (!expected_etag.empty()) request.headers.push_back("If-Match: " + expected_etag);
  const std::string what = url + " (bytes " + std::to_string(offset) + "+" + std::to_string(n) + ")";
  STOKER_ASSIGN_OR_RETURN(StorageResponse r, Execute(request, what));
  if (r.status != 206 && r.status != 200) return ResponseError(r, what);
  if (!expected_etag.empty() && !r.etag.empty() && r.etag != expected_etag) {
    if (stats_ != nullptr) stats_->Failed("changed");
    return FailedPreconditionError(what + ": changed since `stoker index` (its ETag is no longer the indexed one): "
                                          "index the dataset again");
  }
  if (r.overflow || (r.status == 200 && offset != 0)) {
    if (stats_ != nullptr) stats_->Failed("bad_body");
    return DataLossError(what + ": the server ignored the byte range (HTTP " + std::to_string(r.status) + ")");
  }
  if (r.out_bytes != n) {
    if (stats_ != nullptr) stats_->Failed("bad_body");
    return DataLossError(what + ": " + std::to_string(r.out_bytes) + " bytes arrived of " + std::to_string(n) +
                         " (the object is shorter than indexed)");
  }
  return Status::Ok();
}

StatusOr<std::vector<ObjectInfo>> HttpObjectStore::List(const std::string& prefix_url) {
  STOKER_ASSIGN_OR_RETURN(ObjectUrl prefix, ParseObjectUrl(prefix_url));
  if (!prefix.s3()) {
    return UnimplementedError(prefix_url + ": web servers have no listing; name each shard's URL instead "
                                           "(e.g. https://host/data/shard-{0000..0099}.tar, expanded by the shell)");
  }
  std::vector<ObjectInfo> objects;
  std::string token;
  for (size_t page = 0; page < kMaxListPages; ++page) {
    // SigV4 wants the canonical query: parameters sorted by name, values percent-encoded.
    std::string query;
    if (!token.empty()) query += "continuation-token=" + UriEncode(token, false) + "&";
    query += "list-type=2&prefix=" + UriEncode(prefix.key, false);
    STOKER_ASSIGN_OR_RETURN(StorageRequest request, NewRequest("GET", "s3://" + prefix.bucket + "/", query));
    request.max_body = kMaxListBytes;
    STOKER_ASSIGN_OR_RETURN(StorageResponse r, Execute(request, "listing " + prefix_url));
    if (r.status != 200) return ResponseError(r, "listing " + prefix_url);
    auto parsed = ParseListObjectsV2(r.body);
    if (!parsed.ok()) return parsed.status().WithContext("listing " + prefix_url);
    for (ListedObject& o : parsed->objects) {
      objects.push_back({"s3://" + prefix.bucket + "/" + o.key, o.size, std::move(o.etag)});
    }
    if (!parsed->truncated) {
      std::sort(objects.begin(), objects.end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.url < b.url; });
      return objects;
    }
    if (parsed->next_token == token) return DataLossError("listing " + prefix_url + ": the same page came back twice");
    token = parsed->next_token;
  }
  return ResourceExhaustedError("listing " + prefix_url + ": more than " + std::to_string(kMaxListPages) + " pages");
}

Status HttpObjectStore::Put(const std::string& url, std::string_view data) {
  STOKER_ASSIGN_OR_RETURN(StorageRequest request, NewRequest("PUT", url));
  request.upload = data;
  STOKER_ASSIGN_OR_RETURN(StorageResponse r, Execute(request, url));
  if (r.status != 200 && r.status != 201 && r.status != 204) return ResponseError(r, url);
  return Status::Ok();
}

}  // namespace stoker::storage
