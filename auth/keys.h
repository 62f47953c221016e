// CURVE keys: who a process is, and whom it trusts (docs/operations.md, "Security").
//
// Three roles have their own key pairs: the coordinator, workers, clients (training processes). A key pair is a
// small text file `stoker keygen` writes (mode 0600):
//
//   # stoker CURVE key pair ... (a comment: never read)
//   role = client
//   name = team-a
//   public = <40 z85 characters>
//   secret = <40 z85 characters>
//
// A trust file lists public keys, one a line: `<role> <name> <public z85>` (# comments and blank lines allowed).
// Servers admit the keys of the roles they serve (the coordinator: workers and clients; a worker's data port:
// clients); workers and clients take the coordinator's public key from it. Two keys of one role may be listed at
// once, which is how keys are rotated. A peer's identity is "<role>:<name>" of the key it authenticated with.
//
// Secret keys never reach a log, /state or an error message: KeyPair has no stream operator and its errors name
// the file, never its content (nor the "file name" itself when it looks like key text passed by mistake).
//
// A secret key file that other users can read, or anyone but its owner can write, is refused unless
// --allow-readable-key (KeySources::allow_readable_key, or $STOKER_ALLOW_READABLE_KEY=1) says to use it anyway (with
// a warning). One that only its group can read is accepted: silently when the group is the process's and the owner
// is another user (how Kubernetes mounts a Secret for a pod's fsGroup), otherwise with a warning. A trust file that
// anyone but its owner can write is refused the same way: whoever can write it can let their own keys in.
//
// Thread safety: values; the loaders are free functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stoker/status.h"

namespace stoker {

enum class Role { kCoordinator, kWorker, kClient };

const char* RoleName(Role role);
StatusOr<Role> ParseRole(const std::string& text);

struct KeyPair {
  Role role = Role::kClient;
  std::string name;
  std::string public_z85;  // 40 characters
  std::string secret_z85;  // 40 characters; never printed

  std::string identity() const { return std::string(RoleName(role)) + ":" + name; }
};

struct TrustedKey {
  Role role = Role::kClient;
  std::string name;
  std::string public_z85;

  std::string identity() const { return std::string(RoleName(role)) + ":" + name; }
  bool operator==(const TrustedKey&) const = default;
};

// A fresh key pair (libzmq's zmq_curve_keypair, from libsodium's random source).
StatusOr<KeyPair> GenerateKeyPair(Role role, const std::string& name);

// The key file's text, and back. Parsing checks the fields, that the public key belongs to the secret one, and the
// role; errors say which field is wrong, never its value.
std::string FormatKeyPair(const KeyPair& key);
StatusOr<KeyPair> ParseKeyPair(const std::string& text, const std::string& source);
// The key pair in a key file (`stoker keygen` wrote it), its mode checked as above. Errors name the file, never
// its text.
StatusOr<KeyPair> ReadKeyFile(const std::string& path, bool allow_readable = false);

// A trust file's line for a key, and a whole trust file.
std::string TrustLine(const KeyPair& key);
StatusOr<std::vector<TrustedKey>> ParseTrust(const std::string& text, const std::string& source);

// Where a process finds its security settings: files, or the same texts in environment variables.
struct KeySources {
  std::string key_file;    // empty: $STOKER_KEY (the key file's text), then $STOKER_KEY_FILE
  std::string trust_file;  // empty: $STOKER_TRUST (the trust file's text), then $STOKER_TRUST_FILE
  bool insecure = false;   // no CURVE at all (also $STOKER_INSECURE=1): only for trusted networks, logged
  // Use a key file others can read, or a trust file others can write (also $STOKER_ALLOW_READABLE_KEY=1), warned.
  bool allow_readable_key = false;
};

// Whether `sources` ask for no CURVE (KeySources::insecure, or $STOKER_INSECURE=1), as LoadSecurity decides it.
bool InsecureAsked(const KeySources& sources);

// A process's loaded security: its own key (of `role`), the keys it trusts. With `insecure` both are empty.
struct Security {
  bool insecure = false;
  KeyPair own;
  std::vector<TrustedKey> trusted;

  // The trusted keys of `role` (the coordinator's, the clients' ...).
  std::vector<TrustedKey> Trusted(Role role) const;
};

// Loads what `sources` name for a process of `role`. Without a key and without `insecure`: FailedPrecondition
// saying how to make keys (`stoker keygen`) or how to turn CURVE off. `insecure` logs a warning once.
// `or_role`: a key of that role is accepted too (a node-local worker may run with its client's key).
StatusOr<Security> LoadSecurity(Role role, const KeySources& sources, std::optional<Role> or_role = std::nullopt);

// A peer identity as the authenticated "<role>:<name>"; nullopt for anything else (no key: CURVE off).
struct PeerIdentity {
  Role role;
  std::string name;
};
std::optional<PeerIdentity> ParseIdentity(const std::string& user_id);

}  // namespace stoker
