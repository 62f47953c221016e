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
  const std::string w1 = WorkerTicketKey(*master, "w-1"), w2 = WorkerTicketKey(*master, "w-2");
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

}  // namespace
}  // namespace stoker
