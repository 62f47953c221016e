// CurlTransport (curl_transport.h): one blocking libcurl exchange per call on a pooled easy handle.
#include "storage/curl_transport.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstring>
#include <mutex>

namespace stoker::storage {
namespace {

constexpr size_t kMaxErrorBody = 64 << 10;

struct Exchange {
  const StorageRequest* request = nullptr;
  StorageResponse* response = nullptr;
  CURL* curl = nullptr;
};

bool Success(long status) { return status >= 200 && status < 300; }

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* x = static_cast<Exchange*>(user);
  const size_t n = size * count;
  std::string_view line(data, n);
  if (line.starts_with("HTTP/")) {  // a new response (after 100 Continue): forget the previous one's headers
    x->response->etag.clear();
    x->response->retry_after.clear();
    return n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return n;
  std::string name(line.substr(0, colon));
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) value.remove_suffix(1);
  if (name == "etag") x->response->etag = std::string(value.substr(0, 256));
  if (name == "retry-after") x->response->retry_after = std::string(value.substr(0, 32));
  return n;
}

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* x = static_cast<Exchange*>(user);
  const size_t n = size * count;
  long status = 0;
  curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &status);
  StorageResponse& r = *x->response;
  if (Success(status) && x->request->out != nullptr) {
    if (r.out_bytes + n > x->request->out_capacity) {
      r.overflow = true;
      return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
    }
    std::memcpy(x->request->out + r.out_bytes, data, n);
    r.out_bytes += n;
    return n;
  }
  const size_t cap = Success(status) ? x->request->max_body : kMaxErrorBody;
  if (r.body.size() + n > cap) {
    if (Success(status)) {
      r.overflow = true;
      return 0;
    }
    r.body.append(data, cap - r.body.size());  // an error body: keep its start, drop the rest
    return n;
  }
  r.body.append(data, n);
  return n;
}

TransportFailure Classify(CURLcode code) {
  switch (code) {
    case CURLE_OPERATION_TIMEDOUT: return TransportFailure::kTimeout;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: return TransportFailure::kConnect;
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM: return TransportFailure::kReset;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_NOT_BUILT_IN: return TransportFailure::kFatal;
    default: return TransportFailure::kOther;
  }
}

void SetRequestOptions(CURL* c, const StorageRequest& r, const CurlOptions& o, curl_slist* headers, Exchange* x) {
  curl_easy_setopt(c, CURLOPT_URL, r.url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for DNS timeouts
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<int64_t>(1, ToMillis(r.timeout))));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(std::max<int64_t>(1, ToMillis(std::min(r.timeout, r.connect_timeout)))));
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, o.verify_tls ? 1L : 0L);
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, o.verify_tls ? 2L : 0L);
  if (!o.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, o.ca_file.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
  if (r.method == "HEAD") curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  if (r.method == "PUT") {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "PUT");
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, r.upload.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.upload.size()));
  }
  if (r.range) {
    const std::string range = std::to_string(r.range->first) + "-" + std::to_string(r.range->second);
    curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());  // copied by libcurl
  }
  if (!r.aws_sigv4.empty() && r.credentials != nullptr && !r.credentials->anonymous()) {
    curl_easy_setopt(c, CURLOPT_AWS_SIGV4, r.aws_sigv4.c_str());
    curl_easy_setopt(c, CURLOPT_USERNAME, r.credentials->access_key_id.c_str());
    curl_easy_setopt(c, CURLOPT_PASSWORD, r.credentials->secret_access_key.reveal().c_str());
  }
}

}  // namespace

CurlTransport::CurlTransport(const CurlOptions& options) : options_(options) {
  static std::once_flag init;
  std::call_once(init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

CurlTransport::~CurlTransport() {
  MutexLock lock(mu_);
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* CurlTransport::Acquire(TimePoint deadline) {
  MutexLock lock(mu_);
  while (idle_.empty() && created_ >= std::max<size_t>(1, options_.max_connections)) {
    if (std::chrono::steady_clock::now() >= deadline) return nullptr;
    released_.WaitUntil(mu_, deadline);
  }
  if (!idle_.empty()) {
    void* h = idle_.back();
    idle_.pop_back();
    return h;
  }
  ++created_;
  return curl_easy_init();
}

void CurlTransport::Release(void* handle) {
  MutexLock lock(mu_);
  idle_.push_back(handle);
  released_.NotifyOne();
}

StorageResponse CurlTransport::Perform(const StorageRequest& request) {
  StorageResponse response;
  const auto start = std::chrono::steady_clock::now();
  CURL* curl = static_cast<CURL*>(Acquire(start + request.timeout));
  if (curl == nullptr) {
    response.failure = TransportFailure::kTimeout;
    response.failure_detail = "every storage connection stayed busy for the request's whole timeout";
    return response;
  }
  curl_easy_reset(curl);  // options only: the connection and DNS caches stay
  curl_slist* headers = nullptr;
  for (const std::string& h : request.headers) headers = curl_slist_append(headers, h.c_str());
  Exchange exchange{&request, &response, curl};
  char error[CURL_ERROR_SIZE] = {0};
  SetRequestOptions(curl, request, options_, headers, &exchange);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  const CURLcode code = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  curl_off_t length = -1;
  if (curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length) == CURLE_OK) {
    response.content_length = length;
  }
  if (code != CURLE_OK && !(code == CURLE_WRITE_ERROR && response.overflow)) {
    response.failure = Classify(code);
    response.failure_detail = error[0] != '\0' ? error : curl_easy_strerror(code);
  }
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);
  curl_slist_free_all(headers);
  Release(curl);
  response.elapsed = std::chrono::steady_clock::now() - start;
  return response;
}

}  // namespace stoker::storage
