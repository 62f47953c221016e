// HttpObjectStore over a scripted transport: retries within the deadline, the status mapping, ETags, listing pages,
// addressing styles, and that no error ever carries the secret.
#include "storage/object_store.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <functional>
#include <thread>

namespace stoker::storage {
namespace {

constexpr char kSecret[] = "wJalrXUtnFEMI-never-print-me";

class ScriptedTransport final : public HttpTransport {
 public:
  using Step = std::function<StorageResponse(const StorageRequest&)>;
  StorageResponse Perform(const StorageRequest& request) override {
    MutexLock lock(mu_);
    requests.push_back(request);
    if (steps.empty()) return Body(404, "<Error><Code>NoSuchKey</Code></Error>");
    Step step = std::move(steps.front());
    steps.pop_front();
    return step(request);
  }
  static StorageResponse Body(long status, std::string body) {
    StorageResponse r;
    r.status = status;
    r.body = std::move(body);
    return r;
  }
  Mutex mu_;
  std::deque<Step> steps;
  std::vector<StorageRequest> requests;
};

// A 206 carrying bytes [first, last] of `object`.
ScriptedTransport::Step Serve(const std::string& object, const std::string& etag = "\"e1\"") {
  return [object, etag](const StorageRequest& r) {
    StorageResponse resp;
    resp.status = 206;
    resp.etag = etag;
    const size_t n = r.range->second - r.range->first + 1;
    std::memcpy(r.out, object.data() + r.range->first, n);
    resp.out_bytes = n;
    return resp;
  };
}

ScriptedTransport::Step Reply(long status, std::string body = "") {
  return [status, body](const StorageRequest&) { return ScriptedTransport::Body(status, body); };
}

ScriptedTransport::Step Fail(TransportFailure f) {
  return [f](const StorageRequest&) {
    StorageResponse r;
    r.failure = f;
    r.failure_detail = "Connection reset by peer";
    return r;
  };
}

struct Fixture {
  explicit Fixture(Duration deadline = Millis(2000), S3Addressing addressing = S3Addressing::kPath) {
    StorageOptions o;
    o.s3_endpoint = "http://127.0.0.1:9000";
    o.s3_region = "eu-west-1";
    o.s3_addressing = addressing;
    o.credentials.access_key_id = "AKID";
    o.credentials.secret_access_key = Secret(kSecret);
    o.credentials.source = "test";
    o.retry.initial_backoff = Millis(1);
    o.retry.max_backoff = Millis(5);
    o.retry.deadline = deadline;
    auto t = std::make_unique<ScriptedTransport>();
    transport = t.get();
    store = std::make_unique<HttpObjectStore>(o, std::move(t), &stats);
  }
  StorageStats stats;
  ScriptedTransport* transport;
  std::unique_ptr<HttpObjectStore> store;
};

TEST(ObjectStore, RetriesSlowDownsAndResetsThenReads) {
  Fixture f;
  const std::string object = "0123456789abcdef";
  f.transport->steps = {Reply(503, "<Error><Code>SlowDown</Code></Error>"), Fail(TransportFailure::kReset),
                        Reply(500), Serve(object)};
  std::vector<uint8_t> out(6);
  Status s = f.store->ReadRange("s3://bucket/p/a.tar", 4, 6, "\"e1\"", out.data());
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(std::string(out.begin(), out.end()), "456789");
  ASSERT_EQ(f.transport->requests.size(), 4u);
  const StorageRequest& r = f.transport->requests.back();
  EXPECT_EQ(r.url, "http://127.0.0.1:9000/bucket/p/a.tar");
  EXPECT_EQ(r.aws_sigv4, "aws:amz:eu-west-1:s3");
  EXPECT_EQ(r.range->first, 4u);
  EXPECT_EQ(r.range->second, 9u);
  EXPECT_NE(std::find(r.headers.begin(), r.headers.end(), "If-Match: \"e1\""), r.headers.end());
  auto snap = f.stats.Take();
  EXPECT_EQ(snap.requests["503"], 1u);
  EXPECT_EQ(snap.requests["reset"], 1u);
  EXPECT_EQ(snap.requests["206"], 1u);
  EXPECT_EQ(snap.retries["slow_down"], 1u);
  EXPECT_EQ(snap.retries["reset"], 1u);
  EXPECT_EQ(snap.retries["server_error"], 1u);
}

TEST(ObjectStore, GivesUpWithinTheDeadline) {
  Fixture f(Millis(300));
  for (int i = 0; i < 100000; ++i) f.transport->steps.push_back(Reply(503));
  std::vector<uint8_t> out(4);
  const auto start = std::chrono::steady_clock::now();
  Status s = f.store->ReadRange("s3://bucket/a.tar", 0, 4, "", out.data());
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("s3://bucket/a.tar"), std::string::npos);
  EXPECT_NE(s.message().find("gave up after"), std::string::npos);
  EXPECT_LT(took, std::chrono::milliseconds(1000));
  EXPECT_EQ(f.stats.Take().failures["unavailable"], 1u);
}

TEST(ObjectStore, PermanentErrorsAreNotRetriedAndNameTheObjectNotTheSecret) {
  Fixture f;
  f.transport->steps = {Reply(403, "<Error><Code>SignatureDoesNotMatch</Code><Message>bad sig</Message></Error>"),
                        Reply(404, "<Error><Code>NoSuchKey</Code></Error>"), Reply(412)};
  std::vector<uint8_t> out(4);
  Status denied = f.store->ReadRange("s3://bucket/a.tar", 0, 4, "", out.data());
  EXPECT_EQ(denied.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(denied.message().find("SignatureDoesNotMatch"), std::string::npos) << denied.message();
  EXPECT_NE(denied.message().find("s3://bucket/a.tar"), std::string::npos);
  Status missing = f.store->ReadRange("s3://bucket/b.tar", 0, 4, "", out.data());
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  Status changed = f.store->ReadRange("s3://bucket/c.tar", 0, 4, "\"old\"", out.data());
  EXPECT_EQ(changed.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.transport->requests.size(), 3u);
  for (const Status& s : {denied, missing, changed}) EXPECT_EQ(s.message().find(kSecret), std::string::npos);
}

TEST(ObjectStore, RefusesAnotherETagAndWrongLengths) {
  Fixture f;
  const std::string object = "0123456789";
  f.transport->steps = {Serve(object, "\"new\""), [](const StorageRequest&) {
                          StorageResponse r;
                          r.status = 206;
                          r.out_bytes = 2;  // short
                          return r;
                        },
                        [](const StorageRequest&) {
                          StorageResponse r;
                          r.status = 206;
                          r.overflow = true;
                          return r;
                        }};
  std::vector<uint8_t> out(4);
  EXPECT_EQ(f.store->ReadRange("s3://bucket/a.tar", 0, 4, "\"old\"", out.data()).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.store->ReadRange("s3://bucket/a.tar", 0, 4, "", out.data()).code(), StatusCode::kDataLoss);
  EXPECT_EQ(f.store->ReadRange("s3://bucket/a.tar", 0, 4, "", out.data()).code(), StatusCode::kDataLoss);
}

TEST(ObjectStore, ListsEveryPageWithCanonicalQueries) {
  Fixture f(Millis(2000), S3Addressing::kVirtualHost);
  f.transport->steps = {
      Reply(200, "<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken>t/1=</NextContinuationToken>"
                 "<Contents><Key>p/b.tar</Key><Size>5</Size><ETag>\"b\"</ETag></Contents></ListBucketResult>"),
      Reply(200, "<ListBucketResult><IsTruncated>false</IsTruncated>"
                 "<Contents><Key>p/a.tar</Key><Size>3</Size></Contents></ListBucketResult>")};
  auto listed = f.store->List("s3://bucket/p/");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].url, "s3://bucket/p/a.tar");
  EXPECT_EQ((*listed)[1].etag, "\"b\"");
  EXPECT_EQ(f.transport->requests[0].url, "http://bucket.127.0.0.1:9000/?list-type=2&prefix=p%2F");
  EXPECT_EQ(f.transport->requests[1].url,
            "http://bucket.127.0.0.1:9000/?continuation-token=t%2F1%3D&list-type=2&prefix=p%2F");
  EXPECT_EQ(f.store->List("http://host/dir/").status().code(), StatusCode::kUnimplemented);
}

TEST(ObjectStore, PlainHttpIsUnsigned) {
  Fixture f;
  f.transport->steps = {Serve("abcdef")};
  std::vector<uint8_t> out(3);
  ASSERT_TRUE(f.store->ReadRange("http://127.0.0.1:8080/d/a.tar", 1, 3, "", out.data()).ok());
  EXPECT_EQ(f.transport->requests[0].url, "http://127.0.0.1:8080/d/a.tar");
  EXPECT_TRUE(f.transport->requests[0].aws_sigv4.empty());
  EXPECT_EQ(f.transport->requests[0].credentials, nullptr);
}

TEST(ObjectStore, ShutdownEndsABackoffAtOnce) {
  StorageOptions o;
  o.retry.initial_backoff = Millis(5000);
  o.retry.max_backoff = Millis(5000);
  o.retry.deadline = Millis(60000);
  auto t = std::make_unique<ScriptedTransport>();
  for (int i = 0; i < 100; ++i) t->steps.push_back([](const StorageRequest&) {
    StorageResponse r;
    r.status = 503;
    r.retry_after = "5";
    return r;
  });
  HttpObjectStore store(o, std::move(t), nullptr);
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    store.Shutdown();
  });
  std::vector<uint8_t> out(1);
  const auto start = std::chrono::steady_clock::now();
  Status s = store.ReadRange("http://h/a", 0, 1, "", out.data());
  stopper.join();
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

}  // namespace
}  // namespace stoker::storage
