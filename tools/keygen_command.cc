// stoker keygen: CURVE key pairs for the coordinator, workers and clients (auth/keys.h), written as files, and
// their public keys as trust-file lines; --keyring makes a whole set (tools/keyring.h), with --teams a client key per
// team. See docs/operations.md, "Security", for who gets which file.
#include <cstdio>
#include <sstream>

#include "base/env.h"
#include "base/flags.h"
#include "auth/keys.h"
#include "tools/commands.h"
#include "tools/keyring.h"

namespace stoker::tools {

int KeygenCommand(int argc, char** argv) {
  std::string role_text, name = "default", out = ".", trust, keyring, team_list;
  FlagSet flags("stoker keygen --role ROLE [flags]",
                "Makes a CURVE key pair for a coordinator, worker or client: OUT/<role>-<name>.key, readable by its "
                "owner only (the secret: give it only to processes of that role), and prints its public key as a "
                "trust-file line (give that to every process: servers admit the keys they trust, peers find the "
                "coordinator's key there). --keyring DIR instead makes one key of each role and DIR/trust; with "
                "--teams, a client key per team.");
  flags.AddString("role", &role_text, "coordinator, worker or client");
  flags.AddString("name", &name, "the key's name: the peer's identity is <role>:<name> (e.g. a team or job)");
  flags.AddString("out", &out, "directory to write the key file into (made if missing)");
  flags.AddString("trust", &trust, "also append the public key's line to this trust file");
  flags.AddString("keyring", &keyring, "make a coordinator, worker and client key and their trust file here");
  flags.AddString("teams", &team_list,
                  "with --keyring: instead of client.key, a client key per team, e.g. team-a,team-b: "
                  "DIR/client-<team>.key, identity client:<team> (names as --name). Recommended: trainers sharing "
                  "one key are one team (one share, cap and set of job slots), and each can spend the others' "
                  "share");
  Status parsed = flags.Parse(argc, argv, 2);
  if (!parsed.ok()) return Fail("keygen", parsed);
  if (!keyring.empty()) {
    std::vector<std::string> teams;
    std::istringstream list(team_list);
    for (std::string team; std::getline(list, team, ',');) {  // "a, b" as "a,b"
      const size_t first = team.find_first_not_of(' '), last = team.find_last_not_of(' ');
      teams.push_back(first == std::string::npos ? "" : team.substr(first, last - first + 1));
    }
    auto made = MakeKeyring(keyring, teams);
    if (!made.ok()) return Fail("keygen", made.status());
    std::string clients = teams.empty() ? "client.key" : "";
    for (const auto& [team, path] : made->team_keys) {
      clients += (clients.empty() ? "client-" : ", client-") + team + ".key";
    }
    std::printf("keyring in %s: coordinator.key, worker.key, %s (secret, 0600) and trust (public)\n", keyring.c_str(),
                clients.c_str());
    return 0;
  }
  if (!team_list.empty()) return Fail("keygen", InvalidArgumentError("--teams goes with --keyring DIR"));
  auto role = ParseRole(role_text);
  if (!role.ok()) return Fail("keygen", role.status().WithContext("--role"));
  auto key = GenerateKeyPair(*role, name);
  if (!key.ok()) return Fail("keygen", key.status());
  PosixEnv env;
  if (Status made = env.CreateDirectories(out); !made.ok()) return Fail("keygen", made);
  const std::string path = JoinPath(out, role_text + "-" + name + ".key");
  if (Status s = WriteKeyFile(path, *key); !s.ok()) return Fail("keygen", s);
  if (!trust.empty()) {
    if (Status s = AppendTrustLine(trust, *key); !s.ok()) return Fail("keygen", s);
  }
  std::fprintf(stderr, "wrote %s (secret: keep it to %s processes)%s%s; its trust line:\n", path.c_str(),
               role_text.c_str(), trust.empty() ? "" : "; appended to ", trust.c_str());
  std::printf("%s", TrustLine(*key).c_str());
  return 0;
}

}  // namespace stoker::tools
