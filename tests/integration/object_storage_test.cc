// Datasets on object storage against real servers started here: s3rver (SigV4 signatures checked) and nginx
// (byte ranges, ETags), with faults injected between the workers and the server by a FaultProxy — latency, resets
// mid-body, 500s and 503s, a server restart. Every run is judged by the checker: every planned sample exactly once.
// Skipped (not failed) only where the servers are not installed: scripts/install-deps.sh and
// scripts/install-test-servers.sh install them, as CI does.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <utime.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

#include "dataset/manifest.h"
#include "storage/object_store.h"
#include "tests/support/checker.h"
#include "tests/support/fixtures.h"
#include "tests/support/http_client.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_cluster.h"
#include "tests/support/fault_proxy.h"
#include "tests/support/object_servers.h"

namespace stoker::testing {
namespace {

constexpr char kBucket[] = "stoker-test";
constexpr char kKey[] = "stoker-test-key";
constexpr auto kS3RunTimeout = std::chrono::seconds(240);  // reads through s3rver

std::string RandomSecret() {
  std::mt19937_64 rng(std::random_device{}());
  return "s3cret-" + std::to_string(rng()) + "-never-printed";
}

// The credentials every process started from here inherits (the standard AWS variables).
void UseCredentials(const std::string& key, const std::string& secret) {
  ::setenv("AWS_ACCESS_KEY_ID", key.c_str(), 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", secret.c_str(), 1);
  ::unsetenv("AWS_SESSION_TOKEN");
}

// Runs `stoker ARGS`; returns (exit code, output).
std::pair<int, std::string> RunStoker(const TempDir& dir, const std::string& name, std::vector<std::string> args) {
  args.insert(args.begin(), BinaryDirectory() + "/stoker");
  const std::string log = dir.Join(name + ".log");
  auto p = Subprocess::Start(args, log);
  if (!p.ok()) return {-1, p.status().ToString()};
  auto code = p->Wait(std::chrono::seconds(120));
  if (!code) p->Kill();
  return {code.value_or(-1), ReadFile(log)};
}

storage::StorageOptions S3Options(const std::string& endpoint, const std::string& secret) {
  storage::StorageOptions o;
  o.s3_endpoint = endpoint;
  o.s3_addressing = storage::S3Addressing::kPath;
  o.credentials.access_key_id = kKey;
  o.credentials.secret_access_key = storage::Secret(secret);
  o.retry.deadline = Millis(10000);
  return o;
}

// Uploads every shard of a local dataset directory to `prefix` (s3://bucket/dir/).
void Upload(storage::ObjectStore& store, const std::string& local, const std::string& prefix) {
  for (const auto& entry : std::filesystem::directory_iterator(local)) {
    std::string data = ReadFile(entry.path().string());
    Status put = store.Put(prefix + entry.path().filename().string(), data);
    ASSERT_TRUE(put.ok()) << put.ToString();
  }
}

class ObjectStorage : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!S3ServerInstalled() || !NginxInstalled()) {
      GTEST_SKIP() << "s3rver or nginx missing (scripts/install-test-servers.sh, scripts/install-deps.sh)";
    }
  }

  // An s3rver in dir_ under a fresh secret (secret_), holding `images` JPEGs in shards of `per_shard` (a local copy
  // in local_) under *prefix, s3://BUCKET/`folder`/. The processes started from here then get its credentials.
  void StartS3WithShards(uint64_t images, uint32_t per_shard, const std::string& folder, std::string* prefix) {
    secret_ = RandomSecret();
    auto s3 = S3Server::Start(dir_.Join("s3"), kBucket, kKey, secret_);
    ASSERT_TRUE(s3.ok()) << s3.status().ToString();
    s3_ = std::move(*s3);
    auto local = MakeJpegDataset(dir_.path(), "jpegs", images, per_shard);
    ASSERT_TRUE(local.ok()) << local.status().ToString();
    local_ = std::move(*local);
    *prefix = std::string("s3://") + kBucket + "/" + folder + "/";
    auto store = storage::MakeObjectStore(S3Options(s3_->endpoint(), secret_), nullptr);
    Upload(*store, dir_.Join("jpegs"), *prefix);
    UseCredentials(kKey, secret_);
  }

  TempDir dir_;
  std::string secret_;
  std::unique_ptr<S3Server> s3_;
  TestDataset local_;
};

TEST_F(ObjectStorage, IndexesAnS3PrefixByRangeWithSignaturesAndNeverPrintsTheSecret) {
  std::string prefix;
  ASSERT_NO_FATAL_FAILURE(StartS3WithShards(60, 20, "data", &prefix));
  auto [code, out] = RunStoker(dir_, "index", {"index", prefix, "-o", dir_.Join("s3.stoker"), "--s3-endpoint",
                                              s3_->endpoint()});
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("60 samples in 3 tar shards"), std::string::npos) << out;
  PosixEnv env;
  auto manifest = Manifest::Open(env, dir_.Join("s3.stoker"));
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  EXPECT_TRUE((*manifest)->remote());
  EXPECT_EQ((*manifest)->format_version(), 2u);
  EXPECT_EQ((*manifest)->root(), prefix);
  EXPECT_FALSE((*manifest)->shard(0).etag.empty());
  EXPECT_EQ((*manifest)->sample(0).checksum, 0u);  // no --checksum: no sample bytes were read
  // Headers and labels only: a small fraction of the 60 images of ~110 KB.
  auto stats = Manifest::Open(env, local_.manifest);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ((*manifest)->sample(7).offset, (*stats)->sample(7).offset);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(read ([0-9.]+) MB of the dataset's ([0-9.]+) MB)"))) << out;
  EXPECT_LT(std::stod(m[1]), 0.1 * std::stod(m[2])) << out;

  // Virtual-host addressing (BUCKET.s3.localhost; a second server over the same data, whose signature check
  // cannot judge virtual-host requests: s3_server.js), and --checksum reading every byte once for sample checksums.
  auto vhost = S3Server::Start(dir_.Join("s3"), kBucket, kKey, secret_, /*check_signatures=*/false);
  ASSERT_TRUE(vhost.ok()) << vhost.status().ToString();
  auto [vcode, vout] = RunStoker(dir_, "index-virtual",
                                 {"index", prefix, "-o", dir_.Join("s3v.stoker"), "--s3-endpoint",
                                  (*vhost)->virtual_host_endpoint(), "--s3-addressing", "virtual", "--checksum"});
  ASSERT_EQ(vcode, 0) << vout;
  auto checked = Manifest::Open(env, dir_.Join("s3v.stoker"));
  ASSERT_TRUE(checked.ok());
  EXPECT_EQ((*checked)->sample(5).checksum, (*stats)->sample(5).checksum);
  EXPECT_NE((*checked)->sample(5).checksum, 0u);

  // A wrong secret_: SignatureDoesNotMatch, named; neither secret_ ever printed.
  const std::string wrong = RandomSecret();
  UseCredentials(kKey, wrong);
  auto [bad, bad_out] = RunStoker(dir_, "index-bad", {"index", prefix, "-o", dir_.Join("bad.stoker"), "--s3-endpoint",
                                                     s3_->endpoint()});
  EXPECT_NE(bad, 0);
  EXPECT_NE(bad_out.find("SignatureDoesNotMatch"), std::string::npos) << bad_out;
  EXPECT_NE(bad_out.find("access denied"), std::string::npos) << bad_out;
  for (const std::string& text : {out, vout, bad_out}) {
    EXPECT_EQ(text.find(secret_), std::string::npos);
    EXPECT_EQ(text.find(wrong), std::string::npos);
  }
  // A key the server does not know: refused too. (Unsigned requests are not tried: s3rver has no bucket policies
  // and serves anonymous reads, where S3 would refuse a private bucket.)
  ::setenv("AWS_ACCESS_KEY_ID", "unknown-key", 1);
  auto [unknown, unknown_out] = RunStoker(dir_, "index-unknown", {"index", prefix, "-o", dir_.Join("u.stoker"),
                                                                 "--s3-endpoint", s3_->endpoint()});
  EXPECT_NE(unknown, 0);
  EXPECT_NE(unknown_out.find("InvalidAccessKeyId"), std::string::npos) << unknown_out;
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
}

// Workers reading from S3 through a proxy that adds latency, 503 slow-downs, 500s, resets mid-body and a server
// restart: every sample exactly once, the retries counted.
TEST_F(ObjectStorage, WorkersSurviveStorageFaultsExactlyOnce) {
  std::string prefix;
  ASSERT_NO_FATAL_FAILURE(StartS3WithShards(96, 24, "faults", &prefix));
  auto proxy = FaultProxy::Start(s3_->port());
  ASSERT_TRUE(proxy.ok());
  auto [code, out] = RunStoker(dir_, "index", {"index", prefix, "-o", dir_.Join("faults.stoker"), "--s3-endpoint",
                                               s3_->endpoint(), "--checksum"});
  ASSERT_EQ(code, 0) << out;

  tools::LocalCluster cluster(ClusterIn(dir_));
  ASSERT_TRUE(cluster.StartCoordinator().ok());
  const std::vector<std::string> storage = {"--s3-endpoint", (*proxy)->url(), "--storage-request-timeout", "2s",
                                            "--storage-retry-deadline", "20s", "--storage-initial-backoff", "20ms",
                                            "--storage-max-backoff", "500ms", "--read-ahead-bytes", "4000000"};
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(cluster.StartWorker(2, storage).ok());
  TestDataset data{dir_.Join("faults.stoker"), 96, {}};
  JobSpec spec = SpecOver("faults", data, 2, 8, 3);
  (*proxy)->SetLatency(std::chrono::milliseconds(5));
  (*proxy)->FailRequests(503, 12);
  (*proxy)->ResetMidBody(8);
  std::vector<size_t> consumers;
  for (uint32_t r = 0; r < 2; ++r) consumers.push_back(*cluster.StartConsumer("c" + std::to_string(r), spec, r));
  // Once the first epoch is under way: 500s, then the server restarts (its data kept, same port).
  ASSERT_TRUE(tools::WaitForLines(cluster.ConsumerLog(consumers[0]), 3, std::chrono::seconds(120),
                           &cluster.consumer(consumers[0])).ok());
  (*proxy)->FailRequests(500, 6);
  ASSERT_TRUE(s3_->Restart().ok());
  auto codes = cluster.WaitForConsumers(kS3RunTimeout);
  ASSERT_TRUE(codes.ok()) << codes.status().ToString();
  std::vector<std::string> logs;
  for (size_t c : consumers) logs.push_back(cluster.ConsumerLog(c));
  auto verdict = CheckLogs(spec, 96, logs);
  ASSERT_TRUE(verdict.ok()) << verdict.status().ToString();
  EXPECT_TRUE(verdict->ok()) << verdict->Describe();
  for (const tools::EpochVerdict& e : verdict->epochs) EXPECT_EQ(e.quarantined, 0u);
  EXPECT_GT((*proxy)->fails_done(), 0u);
  EXPECT_GT((*proxy)->resets_done(), 0u);
  uint64_t retries = 0;
  for (size_t w = 0; w < 2; ++w) {
    auto metrics = HttpGet(cluster.worker_metrics(w), "/metrics");
    ASSERT_TRUE(metrics.ok());
    const std::string body = metrics->body;
    const std::regex retry(R"re(stoker_worker_storage_retries_total\{reason="[a-z_]+"\} (\d+))re");
    for (auto it = std::sregex_iterator(body.begin(), body.end(), retry); it != std::sregex_iterator(); ++it) {
      retries += std::stoull((*it)[1]);
    }
    EXPECT_NE(body.find("stoker_worker_storage_request_seconds_bucket"), std::string::npos);
    EXPECT_EQ(body.find(secret_), std::string::npos);
    EXPECT_EQ(cluster.ReadLog("worker-" + std::to_string(w)).find(secret_), std::string::npos);
  }
  EXPECT_GT(retries, 0u);
}

// nginx serving the shards: a stored sample damaged behind the same ETag is quarantined by id (its checksum); a
// shard replaced since indexing (new ETag) hands its units back, naming the shard, until it is put back — nothing
// is lost either way.
TEST_F(ObjectStorage, HttpCorruptSamplesAreQuarantinedAndChangedShardsHandedBack) {
  TempDir dir;
  auto web = WebServer::Start(dir.Join("web"));
  ASSERT_TRUE(web.ok()) << web.status().ToString();
  auto local = MakeJpegDataset(dir.path(), "jpegs", 48, 16);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  std::vector<std::string> urls;
  for (const auto& entry : std::filesystem::directory_iterator(dir.Join("jpegs"))) {
    std::filesystem::create_directories((*web)->www() + "/d");
    std::filesystem::copy_file(entry.path(), (*web)->www() + "/d/" + entry.path().filename().string());
    urls.push_back((*web)->url() + "d/" + entry.path().filename().string());
  }
  std::sort(urls.begin(), urls.end());
  std::vector<std::string> args = {"index"};
  args.insert(args.end(), urls.begin(), urls.end());
  args.insert(args.end(), {"-o", dir.Join("web.stoker"), "--checksum"});
  auto [code, out] = RunStoker(dir, "index", args);
  ASSERT_EQ(code, 0) << out;
  PosixEnv env;
  auto manifest = Manifest::Open(env, dir.Join("web.stoker"));
  ASSERT_TRUE(manifest.ok());
  EXPECT_EQ((*manifest)->root(), (*web)->url() + "d/");

  // Damage sample 5's bytes where they are stored, keeping size and mtime: nginx's ETag stays the same.
  const SampleInfo five = (*manifest)->sample(5);
  const std::string shard_path = (*web)->www() + "/d/" + (*manifest)->shard(five.shard).path.substr((*manifest)->root().size());
  struct stat before {};
  ASSERT_EQ(::stat(shard_path.c_str(), &before), 0);
  {
    std::fstream f(shard_path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(five.offset + five.size / 2));
    f.write("CORRUPTED", 9);
  }
  utimbuf times{before.st_atime, before.st_mtime};
  ASSERT_EQ(::utime(shard_path.c_str(), &times), 0);

  tools::LocalCluster cluster(ClusterIn(dir));
  ASSERT_TRUE(cluster.StartCoordinator().ok());
  ASSERT_TRUE(cluster.StartWorker(2).ok());
  TestDataset data{dir.Join("web.stoker"), 48, {}};
  JobSpec spec = SpecOver("web", data, 1, 8, 1);
  auto run = RunJobToEnd(cluster, spec, 48, "web", kS3RunTimeout);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const RunVerdict& v = *run;
  ASSERT_TRUE(v.ok()) << v.Describe();
  ASSERT_EQ(v.epochs.size(), 1u);
  EXPECT_EQ(v.epochs[0].quarantined_ids, (std::vector<uint64_t>{5}));

  // Replace another shard (a new mtime: a new ETag): its units are handed back, the shard named, until it returns.
  const std::string other = (*web)->www() + "/d/" + (*manifest)->shard((five.shard + 1) % 3).path.substr((*manifest)->root().size());
  struct stat original {};
  ASSERT_EQ(::stat(other.c_str(), &original), 0);
  utimbuf newer{original.st_atime, original.st_mtime + 100};
  ASSERT_EQ(::utime(other.c_str(), &newer), 0);
  JobSpec second = SpecOver("web-changed", data, 1, 8, 1);
  auto consumer = cluster.StartConsumer("changed", second, 0);
  ASSERT_TRUE(consumer.ok());
  auto handed_back = WaitForFileContent(
      cluster.LogPath("worker-0"),
      [](const std::string& log) { return log.find("changed since `stoker index`") != std::string::npos; },
      std::chrono::seconds(60));
  ASSERT_TRUE(handed_back.ok()) << cluster.ReadLog("worker-0");
  EXPECT_NE(handed_back->find(other.substr(other.rfind('/') + 1)), std::string::npos);
  utimbuf back{original.st_atime, original.st_mtime};
  ASSERT_EQ(::utime(other.c_str(), &back), 0);  // the indexed object again: the units go through
  auto codes = cluster.WaitForConsumers(kS3RunTimeout);
  ASSERT_TRUE(codes.ok()) << codes.status().ToString();
  auto verdict = CheckLogs(second, 48, {cluster.ConsumerLog(*consumer)});
  ASSERT_TRUE(verdict.ok());
  EXPECT_TRUE(verdict->ok()) << verdict->Describe();
  auto metrics = HttpGet(cluster.worker_metrics(0), "/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_NE(metrics->body.find("stoker_worker_units_total{outcome=\"abandoned\"}"), std::string::npos);
  EXPECT_EQ(metrics->body.find("stoker_worker_units_total{outcome=\"abandoned\"} 0"), std::string::npos);
}

// The demo with chaos (kills, drains, coordinator restarts, partitions) over a bucket: exactly once.
TEST_F(ObjectStorage, DemoWithChaosOverS3DeliversEverySampleExactlyOnce) {
  TempDir dir;
  const std::string secret = RandomSecret();
  auto s3 = S3Server::Start(dir.Join("s3"), kBucket, kKey, secret);
  ASSERT_TRUE(s3.ok()) << s3.status().ToString();
  UseCredentials(kKey, secret);
  ::setenv("STOKER_S3_ENDPOINT", (*s3)->endpoint().c_str(), 1);
  const std::string summary_path = dir.Join("summary.json");
  auto [code, out] = RunStoker(dir, "demo", {"demo", "--chaos", "--object-store", std::string("s3://") + kBucket +
                                             "/demo/", "--data", dir.Join("demo"), "--images", "256", "--epochs", "2",
                                             "--batch-size", "8", "--summary-json", summary_path});
  ::unsetenv("STOKER_S3_ENDPOINT");
  std::string summary = ReadFile(summary_path);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(summary.find("\"ok\": true"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"samples_planned\": 512, \"samples_delivered\": 512, \"duplicates\": 0, \"lost\": 0"),
            std::string::npos)
      << summary;
  EXPECT_EQ(out.find(secret), std::string::npos);
}

}  // namespace
}  // namespace stoker::testing
