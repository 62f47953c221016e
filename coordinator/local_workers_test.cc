// Node-local workers at the coordinator: listed to their own client's session only, leased its units first, held to
// it, outside its team's share; a client key may run them and nothing more. On the real Impl with a fake clock.
#include <gtest/gtest.h>

#include <algorithm>

#include "coordinator/impl_test_fixture.h"
#include "coordinator/journal.h"

namespace stoker::coordinator {
namespace {

const std::string kGroup = "0123456789abcdef0123456789abcdef";
const std::string kOtherGroup = "fedcba9876543210fedcba9876543210";

class LocalWorkersTest : public CoordinatorImplTest {
 protected:
  RegisterClientResponse RegisterIn(const std::string& client, uint32_t rank, const std::string& group,
                                    const Caller& caller = {}, uint32_t window = 4) {
    RegisterClientRequest request{client, "job", rank, spec_, window};
    request.local_group = group;
    auto r = impl_->RegisterClient(request, caller);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : RegisterClientResponse{};
  }
  Status AddLocal(const std::string& id, const std::string& group, const Caller& caller = {}) {
    RegisterWorkerRequest request{id, "ipc:///run/stoker/" + id + ".sock", 1, "t"};
    request.local_group = group;
    return impl_->RegisterWorker(request, caller).status();
  }
  static bool Lists(const std::vector<WorkerInfo>& list, const std::string& id) {
    return std::any_of(list.begin(), list.end(), [&](const WorkerInfo& w) { return w.worker_id == id; });
  }
};

TEST_F(LocalWorkersTest, ListedToTheirGroupsSessionOnly) {
  ASSERT_TRUE(AddLocal("local-a", kGroup).ok());
  AddWorker("pool");
  RegisterClientResponse mine = RegisterIn("c0", 0, kGroup);
  EXPECT_TRUE(Lists(mine.workers, "local-a"));
  EXPECT_TRUE(Lists(mine.workers, "pool"));
  RegisterClientResponse none = Register("c1", 1);  // a session without a group
  EXPECT_FALSE(Lists(none.workers, "local-a"));
  EXPECT_TRUE(Lists(none.workers, "pool"));
  RegisterClientResponse other = RegisterIn("c1", 1, kOtherGroup);  // the same session, another node's group
  EXPECT_FALSE(Lists(other.workers, "local-a"));  // its socket is on another node
  EXPECT_TRUE(Lists(other.workers, "pool"));
}

TEST_F(LocalWorkersTest, LeaseTheirOwnClientsUnitsOnly) {
  ASSERT_TRUE(AddLocal("local-a", kGroup).ok());
  RegisterIn("c0", 0, kGroup);
  RegisterIn("c1", 1, kOtherGroup);
  EXPECT_FALSE(Lease("local-a", 0, 1).empty());
  auto refused = impl_->RequestLease(2, {"local-a", "job", 1, 1, 0});
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
}

// The rank's parked requests: its local worker's first, though the pool worker asked earlier and is as idle.
TEST_F(LocalWorkersTest, ServedBeforeThePoolWhenRoomOpens) {
  ASSERT_TRUE(AddLocal("local-a", kGroup).ok());
  AddWorker("pool");
  RegisterIn("c0", 0, kGroup, {}, 2);
  std::vector<LeaseGrant> first = Lease("pool", 0, 2);
  ASSERT_EQ(first.size(), 2u);  // the window (2) is full
  for (const LeaseGrant& g : first) ASSERT_TRUE(Sent("pool", g).ok());
  ASSERT_TRUE(impl_->RequestLease(10, {"pool", "job", 0, 1, 1000}).ok());
  ASSERT_TRUE(impl_->RequestLease(11, {"local-a", "job", 0, 1, 1000}).ok());
  ASSERT_TRUE(Ack("c0", 0, 1, 2).ok());  // one slot frees
  std::vector<DeferredLeaseReply> replies = impl_->TakeDeferredReplies();
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].handle, 11u);
  ASSERT_EQ(replies[0].response.leases.size(), 1u);
  EXPECT_EQ(impl_->Stats().leases_granted_local, 1u);
}

TEST_F(LocalWorkersTest, RegistrationIsAnUnsealedIpcSocketAndAGroupOfTheSecretsSize) {
  RegisterWorkerRequest tcp{"l1", "tcp://10.0.0.1:7401", 1, "t"};
  tcp.local_group = kGroup;
  EXPECT_EQ(impl_->RegisterWorker(tcp).status().code(), StatusCode::kInvalidArgument);
  RegisterWorkerRequest sealed{"l2", "ipc:///run/s/l2.sock", 1, "t", "", true};
  sealed.local_group = kGroup;
  EXPECT_EQ(impl_->RegisterWorker(sealed).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(AddLocal("l3", "short").code(), StatusCode::kInvalidArgument);
  // A pool worker still may not register an ipc:// socket: it would send every client to its own host.
  EXPECT_EQ(impl_->RegisterWorker({"p", "ipc:///run/s/p.sock", 1, "t"}).status().code(),
            StatusCode::kInvalidArgument);
  // The same id may not turn local (or back) while registered.
  ASSERT_TRUE(AddLocal("l4", kGroup).ok());
  EXPECT_EQ(AddLocal("l4", kOtherGroup).code(), StatusCode::kAlreadyExists);
}

// A client key runs node-local workers and nothing more: no pool worker, no other key's ranks, no other job's spec.
TEST_F(LocalWorkersTest, AClientKeysWorkerServesThatKeysRanksOnly) {
  const Caller alice{"client:alice"}, bob{"client:bob"};
  RegisterWorkerRequest pool{"w-alice", "tcp://10.0.0.1:7401", 1, "t"};
  EXPECT_EQ(impl_->RegisterWorker(pool, alice).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(impl_->GetJob("job", alice).status().code(), StatusCode::kNotFound);
  RegisterIn("c-bob", 1, kGroup, bob);  // bob's session uses the same group (he knows it: he is its client)
  ASSERT_TRUE(AddLocal("l-alice", kGroup, alice).ok());
  EXPECT_EQ(impl_->GetJob("job", alice).status().code(), StatusCode::kPermissionDenied);  // bob's job only
  EXPECT_TRUE(impl_->GetJob("job", bob).ok());
  auto refused = impl_->RequestLease(1, {"l-alice", "job", 1, 1, 0}, alice);
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  RegisterIn("c-alice", 0, kGroup, alice);
  EXPECT_TRUE(impl_->GetJob("job", alice).ok());
  auto granted = impl_->RequestLease(2, {"l-alice", "job", 0, 1, 0}, alice);
  ASSERT_TRUE(granted.ok()) << granted.status().ToString();
  EXPECT_FALSE((*granted)->leases.empty());
}

// A restarted coordinator knows no groups: the client's heartbeat brings its group, and its local workers back.
TEST_F(LocalWorkersTest, AHeartbeatBringsTheGroupBack) {
  RegisterIn("c0", 0, kGroup);
  impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);  // the same journal-less state: a fresh Impl
  RegisterIn("c0", 0, "");
  ASSERT_TRUE(AddLocal("local-a", kGroup).ok());
  ClientHeartbeatRequest hb{"c0", "job", 0, 0, 0, {}, 0};
  hb.local_group = kGroup;
  auto reply = impl_->ClientHeartbeat(hb);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_TRUE(reply->workers_changed);
  EXPECT_TRUE(Lists(reply->workers, "local-a"));
}

// A restarted coordinator does not bring a node-local worker back from its journal (its group is not there: it would
// come back as a pool worker whose ipc:// socket nobody can reach): the worker, under its client's key, is told to
// register again (FAILED_PRECONDITION: a refusal would leave it idle for good), and what it held is not adopted.
TEST_F(LocalWorkersTest, NotJournaledSoARestartHasItRegisterAgainAndAdoptsNothing) {
  const Caller alice{"client:alice"};
  PosixEnv env;
  JournalReplay replay;
  const std::string path = dir_.Join("journal");
  std::vector<LeaseGrant> held;
  {
    auto journal = Journal::Open(env, path, JournalOptions{}, [](const Update&) {}, &replay);
    ASSERT_TRUE(journal.ok());
    impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_, journal->get());
    RegisterIn("c0", 0, kGroup, alice);
    AddWorker("pool");
    ASSERT_TRUE(AddLocal("local-a", kGroup, alice).ok());
    auto leased = impl_->RequestLease(1, {"local-a", "job", 0, 1, 0}, alice);
    ASSERT_TRUE(leased.ok() && leased->has_value());
    held = (*leased)->leases;
    ASSERT_EQ(held.size(), 1u);
    ASSERT_TRUE((*journal)->Sync().ok());
  }
  std::unique_ptr<Journal> journal = RestartFrom(path);
  ASSERT_NE(journal, nullptr);
  EXPECT_TRUE(impl_->WorkerHeartbeat({"pool", {}, false}).ok());
  EXPECT_EQ(impl_->WorkerHeartbeat({"local-a", {}, false}, alice).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(impl_->Stats().workers, 1u);
  ASSERT_TRUE(AddLocal("local-a", kGroup, alice).ok());
  EXPECT_EQ(impl_->Stats().workers_local, 1u);
  auto hb = impl_->WorkerHeartbeat({"local-a", {{"job", 0, held[0].unit, held[0].attempt}}, false}, alice);
  ASSERT_TRUE(hb.ok()) << hb.status().ToString();
  EXPECT_EQ(hb->revoked.size(), 1u);
  EXPECT_EQ(impl_->Stats().leases_adopted, 0u);
  // Until its client's heartbeat says the session goes on, it is given nothing, and not refused.
  auto waiting = impl_->RequestLease(2, {"local-a", "job", 0, 1, 0}, alice);
  ASSERT_TRUE(waiting.ok()) << waiting.status().ToString();
  ASSERT_TRUE(waiting->has_value());
  EXPECT_TRUE((*waiting)->leases.empty());
}

// Node-local workers have places of their own (filling them keeps no pool worker out), and a client key has at most
// 64 for each live rank it holds, and 64 more.
TEST_F(LocalWorkersTest, PlacesOfTheirOwnAndAPerKeyLimit) {
  options_.max_registered_workers = 2;
  impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);
  ASSERT_TRUE(AddLocal("l1", kGroup).ok());
  ASSERT_TRUE(AddLocal("l2", kGroup).ok());
  EXPECT_EQ(AddLocal("l3", kGroup).code(), StatusCode::kResourceExhausted);
  AddWorker("p1");
  AddWorker("p2");
  options_.max_registered_workers = 1000;
  impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);
  const Caller mallory{"client:mallory"};
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(AddLocal("m" + std::to_string(i), kGroup, mallory).ok()) << i;
  EXPECT_EQ(AddLocal("m64", kGroup, mallory).code(), StatusCode::kResourceExhausted);
  RegisterIn("c-m", 0, kGroup, mallory);  // a live rank held: 64 more
  EXPECT_TRUE(AddLocal("m64", kGroup, mallory).ok());
}

// Node-local leases are the client's own cores: they spend none of its team's cap on the pool.
// The client's own cores are outside the shares, so what its units cost them teaches the pool nothing.
TEST_F(LocalWorkersTest, TheirUnitsCostsAreNotTheJobsCost) {
  ASSERT_TRUE(AddLocal("local-a", kGroup).ok());
  RegisterIn("c0", 0, kGroup);
  std::vector<LeaseGrant> g = Lease("local-a", 0, 1);
  ASSERT_EQ(g.size(), 1u);
  ASSERT_TRUE(
      impl_->UnitDone({"local-a", "job", 0, g[0].unit, g[0].attempt, UnitOutcome::kSent, g[0].batch_count, {}, 5.0})
          .ok());
  EXPECT_EQ(impl_->Stats().job_stats.at(0).sample_seconds, 0.0);
  AddWorker("pool");
  g = Lease("pool", 0, 1);
  ASSERT_EQ(g.size(), 1u);
  ASSERT_TRUE(
      impl_->UnitDone({"pool", "job", 0, g[0].unit, g[0].attempt, UnitOutcome::kSent, g[0].batch_count, {}, 0.5}).ok());
  EXPECT_DOUBLE_EQ(impl_->Stats().job_stats.at(0).sample_seconds, 0.5 / (g[0].batch_count * spec_.batch_size))
      << "a pool worker's report counts";
}

TEST_F(LocalWorkersTest, OutsideTheTeamsCap) {
  options_.teams["team"] = TeamPolicy{};
  options_.teams["team"].max_workers = 1;
  impl_ = std::make_unique<CoordinatorImpl>(options_, clock_, env_);
  const Caller team{"client:team"};
  RegisterIn("c0", 0, kGroup, team, 8);
  ASSERT_TRUE(impl_->RegisterWorker({"pool", "tcp://pool:1", 2, "t"}).ok());
  ASSERT_TRUE(AddLocal("local-a", kGroup).ok());
  // One unit (1 batch) leased and unsent is the cap's worth before the pool's rate is known.
  ASSERT_EQ(Lease("pool", 0, 4).size(), 1u);
  EXPECT_TRUE(Lease("pool", 0, 4).empty());
  EXPECT_EQ(Lease("local-a", 0, 4).size(), 4u);
}

}  // namespace
}  // namespace stoker::coordinator
