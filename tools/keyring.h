// Keyrings on disk: the files `stoker keygen` writes, and the set a local cluster (the demo, the tests, the soak,
// the benchmarks) runs with — a key pair for the coordinator, for the workers and for the clients (one, or one per
// team), and one trust file listing their public keys.
//
// Thread safety: free functions.
#pragma once

#include <map>
#include <string>
#include <vector>

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
  std::string client_key;       // dir/client.key; empty in a keyring of teams
  std::string trust;            // dir/trust: the public keys of all of them
  std::map<std::string, std::string> team_keys;  // team -> dir/client-<team>.key, in a keyring of teams

  // The flags a process of `role` takes to use these keys (a client's: client_key, so none in a keyring of teams).
  std::vector<std::string> Flags(Role role) const;
};

// Makes the keyring under `dir` (created), or reuses the one there (its trust file says it is complete; a key file
// it should have and lacks is an error). The coordinator's and workers' keys are named "local". Without `teams`
// one client key, client.key, also named "local"; with them, a client key per team instead, client-<team>.key
// named <team> (identity client:<team>, what the coordinator's shares, caps and job slots go by), the file that
// `stoker keygen --role client --name <team>` writes. Team names follow key names' rules (1-64 characters of
// [A-Za-z0-9._-]), each once; a bad one is refused before anything is written.
StatusOr<Keyring> MakeKeyring(const std::string& dir, const std::vector<std::string>& teams = {});

}  // namespace stoker::tools
