// Keys and the ZAP handler (design section 4b): key files and trust files parse, refuse damage naming the field and never
// printing a key; LoadSecurity says how to make keys; and a real CURVE server behind a ZapHandler admits exactly
// the trusted keys of the roles it serves: two keys of one role at once (a rotation), then only the new one, an
// unknown key and a key of another role refused and counted, identities taken from the key.
#include "auth/curve.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "auth/data_tickets.h"
#include "auth/keys.h"
#include "wire/frames.h"
#include "tests/support/curve_peer.h"

namespace stoker {
namespace {

KeyPair Key(Role role, const std::string& name) {
  auto key = GenerateKeyPair(role, name);
  EXPECT_TRUE(key.ok()) << key.status().ToString();
  return *key;
}

TrustedKey Trusted(const KeyPair& k) { return {k.role, k.name, k.public_z85}; }

TEST(Keys, AKeyFileRoundTripsAndItsDamageIsNamedWithoutTheKey) {
  KeyPair key = Key(Role::kClient, "team-a");
  auto back = ParseKeyPair(FormatKeyPair(key), "client.key");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->identity(), "client:team-a");
  EXPECT_EQ(back->public_z85, key.public_z85);
  EXPECT_EQ(back->secret_z85, key.secret_z85);

  // Another pair's public key beside this secret: refused, and neither key appears in the message.
  KeyPair other = Key(Role::kClient, "team-b");
  std::string text = FormatKeyPair(key);
  text.replace(text.find(key.public_z85), key.public_z85.size(), other.public_z85);
  auto mismatched = ParseKeyPair(text, "client.key");
  ASSERT_FALSE(mismatched.ok());
  const std::string message = mismatched.status().ToString();
  EXPECT_NE(message.find("client.key"), std::string::npos) << message;
  EXPECT_EQ(message.find(key.secret_z85), std::string::npos) << "the secret key leaked into: " << message;
  EXPECT_EQ(message.find(other.public_z85), std::string::npos) << message;

  // A truncated secret: refused without printing what is there.
  std::string cut = FormatKeyPair(key);
  cut.replace(cut.find(key.secret_z85), key.secret_z85.size(), key.secret_z85.substr(0, 30));
  auto truncated = ParseKeyPair(cut, "client.key");
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.status().ToString().find(key.secret_z85.substr(0, 30)), std::string::npos);
}

TEST(Keys, ATrustFileHoldsTwoKeysOfOneRoleAndRefusesAnUnknownRole) {
  KeyPair old_key = Key(Role::kClient, "team-a"), new_key = Key(Role::kClient, "team-a-2");
  const std::string text = "# clients, mid-rotation\n\n" + TrustLine(old_key) + "\n" + TrustLine(new_key) + "\n";
  auto trusted = ParseTrust(text, "trust");
  ASSERT_TRUE(trusted.ok()) << trusted.status().ToString();
  ASSERT_EQ(trusted->size(), 2u);
  EXPECT_EQ((*trusted)[0], Trusted(old_key));
  EXPECT_EQ((*trusted)[1], Trusted(new_key));
  EXPECT_FALSE(ParseTrust("janitor bob " + old_key.public_z85 + "\n", "trust").ok());
  EXPECT_FALSE(ParseTrust("client bob short\n", "trust").ok());
}

TEST(Keys, WithoutAKeyAProcessIsToldHowToMakeOneOrToTurnCurveOff) {
  ::unsetenv("STOKER_KEY");
  ::unsetenv("STOKER_KEY_FILE");
  ::unsetenv("STOKER_TRUST");
  ::unsetenv("STOKER_TRUST_FILE");
  ::unsetenv("STOKER_INSECURE");
  auto none = LoadSecurity(Role::kWorker, KeySources{});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("stoker keygen"), std::string::npos) << none.status().message();
  auto insecure = LoadSecurity(Role::kWorker, KeySources{.insecure = true});
  ASSERT_TRUE(insecure.ok());
  EXPECT_TRUE(insecure->insecure);
}

// A CURVE ROUTER with the coordinator's key behind a ZapHandler that trusts `admitted`, on loopback.
class CurveServer {
 public:
  explicit CurveServer(std::vector<TrustedKey> admitted) : server_key_(Key(Role::kCoordinator, "c")) {
    auto zap = ZapHandler::Start(context_, std::move(admitted));
    EXPECT_TRUE(zap.ok()) << zap.status().ToString();
    zap_ = std::move(*zap);
    MakeCurveServer(router_, server_key_.public_z85, server_key_.secret_z85);
    router_.set(zmq::sockopt::linger, 0);
    router_.bind("tcp://127.0.0.1:*");
    endpoint_ = router_.get(zmq::sockopt::last_endpoint);
  }

  // Sends one message as `who` and returns the identity the server read off it, or "" if nothing arrived in 2 s
  // (the handshake was refused).
  std::string IdentityOfAMessageFrom(const KeyPair& who) {
    zmq::socket_t dealer = testing::Dealer(client_context_, endpoint_, who, server_key_.public_z85);
    zmq::message_t hello("hello", 5);
    (void)dealer.send(hello, zmq::send_flags::dontwait);
    zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0}};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (std::chrono::steady_clock::now() < deadline) {
      EXPECT_TRUE(PollOnce(items, std::chrono::milliseconds(50)).ok());
      if (!(items[0].revents & ZMQ_POLLIN)) continue;
      zmq::message_t routing, body;
      EXPECT_TRUE(router_.recv(routing));
      EXPECT_TRUE(router_.recv(body));
      return PeerIdentityOf(body);
    }
    return "";
  }

  // Waits (2 s at most) until the handler has refused `n` handshakes for `reason`.
  bool RefusedAtLeast(const std::string& reason, uint64_t n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (std::chrono::steady_clock::now() < deadline) {
      auto refused = zap_->Refused();
      if (refused[reason] >= n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  ZapHandler& zap() { return *zap_; }

 private:
  zmq::context_t context_;
  zmq::context_t client_context_;  // the peers' own: a ZAP handler serves every CURVE server of its context
  KeyPair server_key_;
  std::unique_ptr<ZapHandler> zap_;
  zmq::socket_t router_{context_, zmq::socket_type::router};
  std::string endpoint_;
};

TEST(ZapHandler, TwoKeysOfARoleAreAdmittedDuringARotationAndTheOldOneNotAfterIt) {
  KeyPair old_key = Key(Role::kClient, "team-a"), new_key = Key(Role::kClient, "team-a-2");
  {
    CurveServer during({Trusted(old_key), Trusted(new_key)});
    EXPECT_EQ(during.IdentityOfAMessageFrom(old_key), "client:team-a");
    EXPECT_EQ(during.IdentityOfAMessageFrom(new_key), "client:team-a-2");
    EXPECT_EQ(during.zap().admitted(), 2u);
  }
  CurveServer after({Trusted(new_key)});
  EXPECT_EQ(after.IdentityOfAMessageFrom(new_key), "client:team-a-2");
  EXPECT_EQ(after.IdentityOfAMessageFrom(old_key), "");
  EXPECT_TRUE(after.RefusedAtLeast("unknown_key", 1));
}

TEST(ZapHandler, AnUnknownKeyAndAKeyOfARoleTheServerDoesNotServeAreRefusedAndCounted) {
  KeyPair client = Key(Role::kClient, "team-a"), stranger = Key(Role::kClient, "team-a");  // same name, other key
  KeyPair worker = Key(Role::kWorker, "w");
  // A worker's data port serves clients only: the worker key is not among the keys it admits.
  CurveServer data_port({Trusted(client)});
  EXPECT_EQ(data_port.IdentityOfAMessageFrom(stranger), "");
  EXPECT_EQ(data_port.IdentityOfAMessageFrom(worker), "");
  EXPECT_TRUE(data_port.RefusedAtLeast("unknown_key", 2));
  EXPECT_EQ(data_port.IdentityOfAMessageFrom(client), "client:team-a");
  MetricFamilies families;
  CollectHandshakes("worker", &data_port.zap(), families);
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].name, "stoker_worker_handshakes_total");
}

// Polls (5 s at most) until `zap` holds a handshake waiting for its ticket key.
bool AHandshakeWaits(const ZapHandler& zap) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (zap.waiting_for_key() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // another thread's state: polled, with a deadline
  }
  return zap.waiting_for_key() == 1;
}

// A worker's data port before its registration brought the ticket key: a client that dials it then (it was listed
// the moment the reply left) is held, and admitted once the key comes; ZeroMQ would never retry a refusal. Stopping
// the handler while a handshake waits does not wait out the window.
TEST(ZapHandler, APlainHandshakeWaitsForTheTicketKeyAndIsAdmittedWhenItComes) {
  zmq::context_t context, client_context;
  auto zap = ZapHandler::Start(context, {}, /*plain=*/true);
  ASSERT_TRUE(zap.ok()) << zap.status().ToString();
  zmq::socket_t router(context, zmq::socket_type::router);
  MakePlainServer(router);
  router.bind("tcp://127.0.0.1:*");
  const std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  const std::string worker_key = WorkerTicketKey(std::string(32, 'k'), "w-1", "");
  zmq::socket_t dealer(client_context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);  // a message a refused handshake left queued must not hold the context open
  MakePlainClient(dealer, "client:team-a", DataTicket(worker_key, "client:team-a"));
  dealer.connect(endpoint);
  zmq::message_t hello("hello", 5);
  ASSERT_TRUE(dealer.send(hello, zmq::send_flags::dontwait));
  zmq::pollitem_t items[] = {{router.handle(), 0, ZMQ_POLLIN, 0}};
  ASSERT_TRUE(AHandshakeWaits(**zap)) << "the handshake never reached the handler";
  ASSERT_TRUE(PollOnce(items, std::chrono::milliseconds(0)).ok());
  EXPECT_FALSE(items[0].revents & ZMQ_POLLIN) << "admitted without a ticket key";
  (*zap)->SetTicketKey(worker_key);
  ASSERT_TRUE(PollOnce(items, std::chrono::milliseconds(5000)).ok());
  ASSERT_TRUE(items[0].revents & ZMQ_POLLIN) << "not admitted once the key came";
  zmq::message_t routing, body;
  ASSERT_TRUE(router.recv(routing));
  ASSERT_TRUE(router.recv(body));
  EXPECT_EQ(PeerIdentityOf(body), "client:team-a");
  EXPECT_EQ((*zap)->admitted(), 1u);
  EXPECT_EQ((*zap)->Refused().count("no_ticket_key"), 0u);

  // A handshake waiting when the handler stops: the destructor wakes it rather than wait out the window.
  zmq::context_t other_context, other_client_context;
  auto waiting = ZapHandler::Start(other_context, {}, /*plain=*/true);
  ASSERT_TRUE(waiting.ok());
  zmq::socket_t other_router(other_context, zmq::socket_type::router);
  other_router.set(zmq::sockopt::linger, 0);
  MakePlainServer(other_router);
  other_router.bind("tcp://127.0.0.1:*");
  zmq::socket_t other_dealer(other_client_context, zmq::socket_type::dealer);
  other_dealer.set(zmq::sockopt::linger, 0);
  MakePlainClient(other_dealer, "client:team-a", DataTicket(worker_key, "client:team-a"));
  other_dealer.connect(other_router.get(zmq::sockopt::last_endpoint));
  (void)other_dealer.send(zmq::message_t("hello", 5), zmq::send_flags::dontwait);
  ASSERT_TRUE(AHandshakeWaits(**waiting)) << "the handshake never reached the handler";
  const auto stopping = std::chrono::steady_clock::now();
  waiting->reset();
  EXPECT_LT(std::chrono::steady_clock::now() - stopping, ZapHandler::kWaitForTicketKey / 2);
}

}  // namespace
}  // namespace stoker
