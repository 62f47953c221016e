// Read-ahead from object storage over an in-memory store: coalescing, bytes handed to the right samples, the memory
// budget held and returned (also when a unit is dropped), and the remote reader's verdicts — checksum mismatches
// read twice then quarantined, storage failures handed back.
#include "worker/read_ahead.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>

#include "base/hash.h"
#include "dataset/manifest.h"
#include "tests/support/temp_dir.h"
#include "worker/remote_reader.h"

namespace stoker::worker {
namespace {

class MemoryStore final : public storage::ObjectStore {
 public:
  StatusOr<storage::ObjectInfo> Stat(const std::string& url) override { return storage::ObjectInfo{url, objects.at(url).size(), etag}; }
  StatusOr<std::vector<storage::ObjectInfo>> List(const std::string&) override { return UnimplementedError("no"); }
  Status Put(const std::string&, std::string_view) override { return UnimplementedError("no"); }
  Status ReadRange(const std::string& url, uint64_t offset, size_t n, const std::string& expected_etag,
                   uint8_t* out) override {
    ++requests;
    if (!fail.empty()) return fail_status;
    if (!expected_etag.empty() && expected_etag != etag) return FailedPreconditionError(url + ": changed");
    auto it = objects.find(url);
    if (it == objects.end()) return NotFoundError(url + ": not found");
    std::memcpy(out, it->second.data() + offset, n);
    if (corrupt_next > 0) {
      --corrupt_next;
      out[0] ^= 0xff;
    }
    return Status::Ok();
  }
  std::map<std::string, std::string> objects;
  std::string etag = "\"e\"";
  std::atomic<int> requests{0};
  std::atomic<int> corrupt_next{0};
  std::string fail;
  Status fail_status;
};

TEST(Coalesce, MergesNeighboursOfAShardWithinTheGap) {
  std::vector<SampleSpan> spans = {{0, 1000, 100}, {1, 0, 10}, {0, 0, 100}, {0, 150, 50}, {0, 100000, 10}};
  auto ranges = CoalesceSpans(spans, /*max_gap=*/1000, /*max_length=*/1 << 20);
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(ranges[0].shard, 0u);
  EXPECT_EQ(ranges[0].offset, 0u);
  EXPECT_EQ(ranges[0].length, 1100u);
  EXPECT_EQ(ranges[0].members, (std::vector<size_t>{2, 3, 0}));
  EXPECT_EQ(ranges[1].offset, 100000u);
  EXPECT_EQ(ranges[2].shard, 1u);
  auto capped = CoalesceSpans(spans, 1000, 120);
  EXPECT_EQ(capped.size(), 5u);  // 0+100 then 150..200 would exceed 120: each alone
  size_t members = 0;
  for (const auto& r : capped) members += r.members.size();
  EXPECT_EQ(members, spans.size());
}

struct Dataset {
  // 40 samples in one shard; every third gap is too wide to coalesce.
  Dataset() {
    std::string shard;
    std::vector<uint64_t> offsets;
    for (int i = 0; i < 40; ++i) {
      offsets.push_back(shard.size());
      shard += Sample(i);
      shard += std::string(i % 3 == 0 ? 100000 : 10, '\0');
    }
    store.objects["s3://bucket/data/a.tar"] = shard;
    ManifestWriter writer("s3://bucket/data", SourceKind::kTarShards);
    uint32_t s = writer.AddShard("a.tar", shard.size(), 0, "\"e\"");
    for (int i = 0; i < 40; ++i) {
      const std::string sample = Sample(i);
      writer.AddSample(s, offsets[i], static_cast<uint32_t>(sample.size()), i, ImageFormat::kJpeg,
                       "k" + std::to_string(i), "", Xxh64(sample.data(), sample.size()));
    }
    PosixEnv env;
    EXPECT_TRUE(writer.Write(env, dir.Join("m.stoker"), "test").ok());
    manifest = *Manifest::Open(env, dir.Join("m.stoker"));
  }
  std::string Sample(int i) const { return std::string(1000 + i, static_cast<char>('a' + i % 26)); }
  testing::TempDir dir;
  MemoryStore store;
  std::shared_ptr<const Manifest> manifest;
};

TEST(ReadAhead, ServesEverySampleAndReturnsItsMemory) {
  Dataset d;
  RangeFetcher fetcher(d.store, /*budget_bytes=*/8 << 10, /*threads=*/3);
  RemoteSampleReader reader(d.store, fetcher.queue(), d.manifest, RemoteReaderOptions{});
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 40; ++i) ids.push_back(39 - i);
  ids.push_back(5);  // padding repeats a sample
  auto ahead = reader.Prefetch(ids);
  ASSERT_NE(ahead, nullptr);
  EXPECT_LT(ahead->range_count(), 40u);  // neighbours coalesced
  EXPECT_EQ(fetcher.queue()->gauges().units, 1u);
  for (uint64_t id : ids) {
    std::vector<uint8_t> bytes;
    ReadFailure failure;
    ASSERT_TRUE(reader.Read(id, ahead.get(), &bytes, &failure)) << failure.detail;
    EXPECT_EQ(std::string(bytes.begin(), bytes.end()), d.Sample(static_cast<int>(id)));
    EXPECT_LE(fetcher.queue()->gauges().bytes, uint64_t{8 << 10} + 200000);
  }
  EXPECT_EQ(d.store.requests.load(), static_cast<int>(ahead->range_count()));  // nothing read twice
  EXPECT_EQ(fetcher.queue()->gauges().bytes, 0u);
  ahead.reset();
  // A fetch thread may still hold the unit for a moment after its last range arrived (it lets go after Fetch
  // returns): the unit closes when the last owner lets go, so wait for that, with a deadline.
  EXPECT_TRUE(fetcher.queue()->WaitUntilIdle(std::chrono::seconds(10)));
  EXPECT_EQ(fetcher.queue()->gauges().units, 0u);
}

TEST(ReadAhead, ADroppedUnitGivesItsMemoryBack) {
  Dataset d;
  RangeFetcher fetcher(d.store, 1 << 20, 2);
  RemoteSampleReader reader(d.store, fetcher.queue(), d.manifest, RemoteReaderOptions{});
  auto ahead = reader.Prefetch({1, 2, 3, 4});
  std::vector<uint8_t> bytes;
  ReadFailure failure;
  ASSERT_TRUE(reader.Read(1, ahead.get(), &bytes, &failure));  // its range has arrived
  ahead.reset();                                                // revoked: 2, 3, 4 never taken
  // A fetch thread may hold the unit a moment longer (it closes with its last reference).
  EXPECT_TRUE(fetcher.queue()->WaitUntilIdle(std::chrono::seconds(10)));
  EXPECT_EQ(fetcher.queue()->gauges().bytes, 0u);
  EXPECT_EQ(fetcher.queue()->gauges().units, 0u);
}

TEST(RemoteReader, AMismatchIsReadAgainThenQuarantined) {
  Dataset d;
  RangeFetcher fetcher(d.store, 1 << 20, 1);
  RemoteSampleReader reader(d.store, fetcher.queue(), d.manifest, RemoteReaderOptions{});
  std::vector<uint8_t> bytes;
  ReadFailure failure;
  d.store.corrupt_next = 1;  // damaged on the way once: the second read is good
  EXPECT_TRUE(reader.Read(7, nullptr, &bytes, &failure)) << failure.detail;
  d.store.corrupt_next = 2;  // damaged where it is stored
  EXPECT_FALSE(reader.Read(7, nullptr, &bytes, &failure));
  EXPECT_EQ(failure.reason, "checksum_mismatch");
  EXPECT_FALSE(failure.hand_back);
}

TEST(RemoteReader, StorageFailuresHandTheUnitBack) {
  Dataset d;
  RangeFetcher fetcher(d.store, 1 << 20, 2);
  RemoteSampleReader reader(d.store, fetcher.queue(), d.manifest, RemoteReaderOptions{});
  d.store.fail = "yes";
  d.store.fail_status = PermissionDeniedError("s3://bucket/data/a.tar: access denied (HTTP 403)");
  auto ahead = reader.Prefetch({3, 4});
  std::vector<uint8_t> bytes;
  ReadFailure failure;
  EXPECT_FALSE(reader.Read(3, ahead.get(), &bytes, &failure));
  EXPECT_TRUE(failure.hand_back);
  EXPECT_EQ(failure.reason, "storage_denied");
  EXPECT_NE(failure.detail.find("a.tar"), std::string::npos);
  d.store.fail.clear();
  d.store.etag = "\"replaced\"";
  EXPECT_FALSE(reader.Read(9, nullptr, &bytes, &failure));
  EXPECT_EQ(failure.reason, "storage_changed");
}

}  // namespace
}  // namespace stoker::worker
