// The CoordinatorImpl tests' fixture: a 100-sample manifest on disk, a job of 2 ranks x batch 10 over 2 epochs, a
// FakeClock, and one-line helpers for the calls peers make. impl_test.cc and scheduling_test.cc use it.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "coordinator/impl.h"
#include "coordinator/journal.h"
#include "dataset/manifest.h"
#include "tests/support/temp_dir.h"

namespace stoker::coordinator {

using testing::TempDir;

class CoordinatorImplTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ManifestWriter writer(dir_.path(), SourceKind::kTarShards);
    uint32_t shard = writer.AddShard("s.tar", 1 << 20, 0);
    for (int i = 0; i < 100; ++i) writer.AddSample(shard, 512 * i, 100, i % 10, ImageFormat::kJpeg, "k");
    PosixEnv env;
    ASSERT_TRUE(writer.Write(env, dir_.Join("m.stoker"), "test").ok());
    spec_.name = "job";
    spec_.manifest_path = dir_.Join("m.stoker");
    spec_.batch_size = 10;
    spec_.world_size = 2;
    spec_.epochs = 2;
    options_.lease_ttl = Millis(3000);
    options_.ack_timeout = Millis(5000);
    options_.client_timeout = Millis(10000);
    // The window's own rules, apart from the workers' queues (scheduling_test.cc tests those).
    options_.worker_queue_batches = 1000;
    options_.worker_registrations_per_second = 0;  // registration_test.cc tests the pace
    impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);
  }

  RegisterClientResponse Register(const std::string& client, uint32_t rank, uint32_t window = 4) {
    auto r = impl_->RegisterClient({client, "job", rank, spec_, window});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : RegisterClientResponse{};
  }
  void AddWorker(const std::string& id) { ASSERT_TRUE(impl_->RegisterWorker({id, "tcp://" + id + ":1", 2, "t"}).ok()); }
  std::vector<LeaseGrant> Lease(const std::string& worker, uint32_t rank, uint32_t max, uint32_t wait_ms = 0) {
    auto r = impl_->RequestLease(1, {worker, "job", rank, max, wait_ms});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok() || !r->has_value()) return {};
    return (*r)->leases;
  }
  Status Ack(const std::string& client, uint32_t rank, uint64_t consumed, uint64_t watermark,
             std::vector<uint64_t> above = {}) {
    return impl_->ClientHeartbeat({client, "job", rank, consumed, watermark, std::move(above), 0}).status();
  }
  // The coordinator restarted from the journal at `path`: a new Impl given every record it replays, restored. The
  // journal it goes on appending to must outlive it.
  std::unique_ptr<Journal> RestartFrom(const std::string& path) {
    std::vector<Update> updates;
    JournalReplay replay;
    auto journal = Journal::Open(env_, path, JournalOptions{}, [&](const Update& u) { updates.push_back(u); }, &replay);
    EXPECT_TRUE(journal.ok()) << journal.status().ToString();
    if (!journal.ok()) return nullptr;
    impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_, journal->get());
    for (const Update& u : updates) impl_->Restore(u);
    impl_->FinishRestore();
    return std::move(*journal);
  }
  Status Sent(const std::string& worker, const LeaseGrant& g) {
    return impl_->UnitDone({worker, "job", g.rank, g.unit, g.attempt, UnitOutcome::kSent, g.batch_count, {}});
  }

  TempDir dir_;
  JobSpec spec_;
  CoordinatorOptions options_;
  FakeClock clock_;
  PosixEnv env_;
  std::unique_ptr<CoordinatorImpl> impl_;
};

}  // namespace stoker::coordinator
