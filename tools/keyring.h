// Keyrings on disk: the files `stoker keygen` writes, and the set a local cluster (the demo, the tests, the soak,
// the benchmarks) runs with — a key pair for the coordinator, for the workers and for the clients, and one trust
// file listing the three public keys.
//
// Thread safety: free functions.
#pragma once

#include <string>

#include "auth/keys.h"
#include "stoker/status.h"

namespace stoker::tools {

// Writes `key` to `path` readable by its owner only (0600), refusing to overwrite an existing file.
Status WriteKeyFile(const std::string& path, const KeyPair& key);
// Appends the key's public line to the trust file at `path` (created 0644 if missing).
Status AppendTrustLine(const std::string& path, const KeyPair& key);

// A local cluster's keys under one directory.
struct Keyring {
  std::string dir;
  std::string coordinator_key;  // dir/coordinator.key
  std::string worker_key;       // dir/worker.key
  std::string client_key;       // dir/client.key
  std::string trust;            // dir/trust: the three public keys

  // The flags a process of `role` takes to use these keys.
  std::vector<std::string> Flags(Role role) const;
};

// Makes the keyring under `dir` (created), or reuses the one there.
StatusOr<Keyring> MakeKeyring(const std::string& dir);

}  // namespace stoker::tools
