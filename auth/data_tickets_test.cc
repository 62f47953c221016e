// Data tickets: a ticket is its identity's, at its worker, and no one else's.
#include "auth/data_tickets.h"

#include <gtest/gtest.h>

namespace stoker {
namespace {

TEST(DataTickets, ATicketIsItsIdentitysAtItsWorkerAndNoOneElses) {
  auto coordinator = GenerateKeyPair(Role::kCoordinator, "c");
  ASSERT_TRUE(coordinator.ok());
  auto master = DataTicketMasterKey(*coordinator);
  ASSERT_TRUE(master.ok());
  EXPECT_EQ(master->size(), 32u);
  EXPECT_EQ(*DataTicketMasterKey(*coordinator), *master) << "derived again after a restart, the same";
  const std::string w1 = WorkerTicketKey(*master, "w-1", ""), w2 = WorkerTicketKey(*master, "w-2", "");
  EXPECT_NE(w1, w2);
  const std::string alice = DataTicket(w1, "client:alice");
  EXPECT_EQ(alice.size(), 64u);
  EXPECT_TRUE(VerifyDataTicket(w1, "client:alice", alice));
  EXPECT_FALSE(VerifyDataTicket(w1, "client:bob", alice)) << "another identity with alice's ticket";
  EXPECT_FALSE(VerifyDataTicket(w2, "client:alice", alice)) << "alice's ticket at another worker";
  EXPECT_FALSE(VerifyDataTicket(w1, "client:alice", alice.substr(0, 63)));
  EXPECT_FALSE(VerifyDataTicket(w1, "client:alice", ""));
  auto other = GenerateKeyPair(Role::kCoordinator, "c");
  EXPECT_NE(*DataTicketMasterKey(*other), *master) << "another coordinator key, other tickets";
}

std::string HexOf(const std::string& bytes) {
  std::string hex;
  for (unsigned char c : bytes) hex += "0123456789abcdef"[c >> 4], hex += "0123456789abcdef"[c & 15];
  return hex;
}

// A worker's ticket key is its id's and its session's: a process that registers the id after it (a restart, or
// another process of the worker key once the id is lost) gets another key, so no ticket or seal key of the first
// holds at the second. Known answers: keyed BLAKE2b-256 (libsodium's crypto_generichash) as Python's
// hashlib.blake2b(message, key=bytes(range(32)), digest_size=32) gives it, with the check bytes 32..63.
TEST(DataTickets, AWorkersTicketKeyIsItsSessionsAndKnownAnswersHold) {
  std::string master, check;
  for (int i = 0; i < 32; ++i) master.push_back(static_cast<char>(i)), check.push_back(static_cast<char>(32 + i));
  EXPECT_EQ(HexOf(WorkerTicketKey(master, "w-1", check)),
            "96372c5efabb69a2d2dd39dee87b2d6473f653b200191924b27e22229dd19d0a");  // b"worker session\n" + check + id
  EXPECT_EQ(HexOf(WorkerTicketKey(master, "w-1", "")),
            "dade11d060cc9df25b89cc31ec667f718bb7492130cebd13829f710124fbfe8d");  // b"worker\nw-1": unbound
  const std::string a = SessionCheck(NewSessionSecret()), b = SessionCheck(NewSessionSecret());
  EXPECT_NE(WorkerTicketKey(master, "w-1", a), WorkerTicketKey(master, "w-1", b));
  EXPECT_EQ(WorkerTicketKey(master, "w-1", a), WorkerTicketKey(master, "w-1", a)) << "derived again, the same";
  EXPECT_NE(WorkerTicketKey(master, "w-1", a), WorkerTicketKey(master, "w-2", a));
}

// A known answer: BLAKE2b-256 (libsodium's crypto_generichash, unkeyed) of the label and bytes 0..31, as Python's
// hashlib.blake2b(b"stoker rank session v1\n" + bytes(range(32)), digest_size=32) gives it.
TEST(RankSessions, ASessionsCheckIsItsSecretsBlake2bAndNoOtherSecretMatches) {
  std::string secret;
  for (int i = 0; i < 32; ++i) secret.push_back(static_cast<char>(i));
  const std::string check = SessionCheck(secret);
  EXPECT_EQ(HexOf(check), "24c857127a1530d3aed224e2397eb773a99400a7aff75da1d2d17d3074dbe694");
  EXPECT_TRUE(SessionMatches(check, secret));
  EXPECT_FALSE(SessionMatches(check, ""));
  EXPECT_FALSE(SessionMatches(check, secret.substr(0, 31)));
  EXPECT_FALSE(SessionMatches(check.substr(0, 31), secret)) << "a damaged check matches nothing";
  EXPECT_TRUE(SessionMatches("", "anything")) << "an unbound session (an older journal's)";
  const std::string a = NewSessionSecret(), b = NewSessionSecret();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
  EXPECT_FALSE(SessionMatches(SessionCheck(a), b));
}

}  // namespace
}  // namespace stoker
