// Data tickets (data_tickets.h): keyed BLAKE2b (libsodium's crypto_generichash) all the way down.
#include "auth/data_tickets.h"

#include <sodium.h>
#include <zmq.h>

#include "stoker/check.h"

namespace stoker {
namespace {

constexpr size_t kKeyBytes = crypto_generichash_KEYBYTES;  // 32

std::string KeyedHash(const std::string& key, const std::string& message) {
  STOKER_CHECK(key.size() >= crypto_generichash_KEYBYTES_MIN && key.size() <= crypto_generichash_KEYBYTES_MAX,
               "a data ticket key of the wrong size");
  std::string out(kKeyBytes, '\0');
  crypto_generichash(reinterpret_cast<unsigned char*>(out.data()), out.size(),
                     reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                     reinterpret_cast<const unsigned char*>(key.data()), key.size());
  return out;
}

}  // namespace

StatusOr<std::string> DataTicketMasterKey(const KeyPair& coordinator) {
  std::string secret(32, '\0');
  if (coordinator.secret_z85.size() != 40 ||
      zmq_z85_decode(reinterpret_cast<uint8_t*>(secret.data()), coordinator.secret_z85.c_str()) == nullptr) {
    return InvalidArgumentError("the coordinator's key pair has no valid secret key");
  }
  std::string key = KeyedHash(secret, "stoker data tickets v1");
  sodium_memzero(secret.data(), secret.size());
  return key;
}

std::string WorkerTicketKey(const std::string& master_key, const std::string& worker_id,
                            const std::string& session_check) {
  if (session_check.empty()) return KeyedHash(master_key, "worker\n" + worker_id);
  // The check has a fixed length, so it goes first and the id after it: no two (check, id) pairs read alike.
  return KeyedHash(master_key, "worker session\n" + session_check + worker_id);
}

std::string DataTicket(const std::string& worker_key, const std::string& client_identity) {
  const std::string mac = KeyedHash(worker_key, "client\n" + client_identity);
  std::string hex(2 * mac.size() + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), reinterpret_cast<const unsigned char*>(mac.data()), mac.size());
  hex.pop_back();
  return hex;
}

std::string DataSealKey(const std::string& worker_key, const std::string& client_identity) {
  return KeyedHash(worker_key, "seal\n" + client_identity);
}

bool VerifyDataTicket(const std::string& worker_key, const std::string& client_identity, const std::string& ticket) {
  const std::string expected = DataTicket(worker_key, client_identity);
  return ticket.size() == expected.size() && sodium_memcmp(ticket.data(), expected.data(), expected.size()) == 0;
}

namespace {

// As libsodium's documentation asks: sodium_init() once, before its first use.
void EnsureSodium() {
  static const int initialised = sodium_init();
  STOKER_CHECK(initialised >= 0, "libsodium failed to initialise");
}

}  // namespace

std::string NewSessionSecret() {
  EnsureSodium();
  std::string secret(kSessionSecretBytes, '\0');
  randombytes_buf(secret.data(), secret.size());
  return secret;
}

Status CheckSessionSecret(const std::string& secret) {
  if (secret.empty() || secret.size() == kSessionSecretBytes) return Status::Ok();
  return InvalidArgumentError("a session's secret is " + std::to_string(kSessionSecretBytes) +
                              " random bytes (auth/data_tickets.h)");
}

std::string SessionCheck(const std::string& secret) {
  static_assert(crypto_generichash_BYTES == kSessionCheckBytes);
  EnsureSodium();
  std::string out(crypto_generichash_BYTES, '\0');
  const std::string message = "stoker rank session v1\n" + secret;
  crypto_generichash(reinterpret_cast<unsigned char*>(out.data()), out.size(),
                     reinterpret_cast<const unsigned char*>(message.data()), message.size(), nullptr, 0);
  return out;
}

bool SessionMatches(const std::string& check, const std::string& secret) {
  if (check.empty()) return true;
  const std::string expected = SessionCheck(secret);
  return check.size() == expected.size() && sodium_memcmp(check.data(), expected.data(), expected.size()) == 0;
}

}  // namespace stoker
