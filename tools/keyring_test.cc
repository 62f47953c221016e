// Keyrings on disk (keyring.h): what `stoker keygen` writes is what the processes accept, whatever the umask, and
// a keyring of teams holds a client key per team.
#include "tools/keyring.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"

namespace stoker::tools {
namespace {

// Regression (issue 29's trust-file check): the trust file was appended through an ofstream, so under a umask of
// 002 (a user with a private group) it was made 0664, which the processes now refuse as writable by others.
TEST(Keyring, ATrustFileKeygenMakesIs0644WhateverTheUmaskAndIsAccepted) {
  testing::TempDir dir;
  auto coordinator = GenerateKeyPair(Role::kCoordinator, "default");
  auto worker = GenerateKeyPair(Role::kWorker, "default");
  ASSERT_TRUE(coordinator.ok() && worker.ok());
  const std::string trust = dir.Join("trust");
  const mode_t old_umask = ::umask(0002);
  const Status appended = AppendTrustLine(trust, *coordinator);
  const Status again = AppendTrustLine(trust, *worker);
  ::umask(old_umask);
  ASSERT_TRUE(appended.ok()) << appended.ToString();
  ASSERT_TRUE(again.ok()) << again.ToString();
  struct stat st {};
  ASSERT_EQ(::stat(trust.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  const std::string key = dir.Join("worker.key");
  ASSERT_TRUE(WriteKeyFile(key, *worker).ok());
  auto security = LoadSecurity(Role::kWorker, {.key_file = key, .trust_file = trust});
  ASSERT_TRUE(security.ok()) << security.status().ToString();
  EXPECT_EQ(security->trusted.size(), 2u);
  EXPECT_FALSE(AppendTrustLine(dir.Join("no/such/dir/trust"), *worker).ok());
}


// The mode of the file at `path` (0 if it cannot be read).
mode_t ModeOf(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_mode & 0777 : 0;
}

// `stoker keygen --keyring DIR --teams a,b` (issue 29): a client key per team, client-<team>.key with identity
// client:<team>, 0600, instead of client.key, and the trust file lists every key the keyring holds.
TEST(Keyring, ATeamKeyringHasAClientKeyPerTeamAndTrustsThemAll) {
  testing::TempDir dir;
  auto ring = MakeKeyring(dir.Join("keys"), {"team-a", "team.b_2"});
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  EXPECT_EQ(ring->client_key, "");
  EXPECT_FALSE(std::filesystem::exists(dir.Join("keys/client.key")));
  ASSERT_EQ(ring->team_keys.size(), 2u);
  auto trust = ParseTrust(testing::ReadFile(ring->trust), ring->trust);
  ASSERT_TRUE(trust.ok()) << trust.status().ToString();
  ASSERT_EQ(trust->size(), 4u);
  for (const auto& [team, path] : ring->team_keys) {
    EXPECT_EQ(path, dir.Join("keys/client-" + team + ".key"));
    EXPECT_EQ(ModeOf(path), 0600u);
    auto key = ReadKeyFile(path);
    ASSERT_TRUE(key.ok()) << key.status().ToString();
    EXPECT_EQ(key->identity(), "client:" + team);
    EXPECT_NE(std::find(trust->begin(), trust->end(), TrustedKey{Role::kClient, team, key->public_z85}), trust->end())
        << team << " is not in the trust file";
    auto security = LoadSecurity(Role::kClient, {.key_file = path, .trust_file = ring->trust});
    EXPECT_TRUE(security.ok()) << security.status().ToString();
  }
  EXPECT_EQ(ModeOf(ring->coordinator_key), 0600u);
  EXPECT_EQ(ModeOf(ring->worker_key), 0600u);
  EXPECT_EQ((*trust)[0].role, Role::kCoordinator);
  EXPECT_EQ((*trust)[1].role, Role::kWorker);
  // Made again: the keyring there is kept, keys and all.
  const std::string first = testing::ReadFile(ring->team_keys.at("team-a"));
  auto again = MakeKeyring(dir.Join("keys"), {"team-a", "team.b_2"});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(testing::ReadFile(again->team_keys.at("team-a")), first);
}

// Without teams, the keyring is what it always was: one client key, client.key.
TEST(Keyring, WithoutTeamsAKeyringHasOneClientKey) {
  testing::TempDir dir;
  auto ring = MakeKeyring(dir.Join("keys"));
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  EXPECT_TRUE(ring->team_keys.empty());
  EXPECT_EQ(ring->client_key, dir.Join("keys/client.key"));
  auto key = ReadKeyFile(ring->client_key);
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(key->identity(), "client:local");
  auto trust = ParseTrust(testing::ReadFile(ring->trust), ring->trust);
  ASSERT_TRUE(trust.ok() && trust->size() == 3u);
}

// A bad or repeated team name is refused, saying which, and nothing is written; so is a team the keyring already
// there lacks, saying how to add it.
TEST(Keyring, BadTeamsAreRefusedBeforeAnythingIsWritten) {
  testing::TempDir dir;
  for (const std::vector<std::string>& teams : std::vector<std::vector<std::string>>{
           {"team-a", "a/b"}, {"team-a", ""}, {"team a"}, {std::string(65, 'x')}, {"team-a", "team-a"}}) {
    auto ring = MakeKeyring(dir.Join("keys"), teams);
    ASSERT_FALSE(ring.ok());
    EXPECT_EQ(ring.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(ring.status().message().find("team"), std::string::npos) << ring.status().ToString();
    EXPECT_FALSE(std::filesystem::exists(dir.Join("keys/trust")));
    EXPECT_FALSE(std::filesystem::exists(dir.Join("keys/coordinator.key")));
  }
  auto twice = MakeKeyring(dir.Join("keys"), {"team-a", "team-a"});
  EXPECT_NE(twice.status().message().find("'team-a' is named twice"), std::string::npos) << twice.status().ToString();
  ASSERT_TRUE(MakeKeyring(dir.Join("keys"), {"team-a"}).ok());
  auto more = MakeKeyring(dir.Join("keys"), {"team-a", "team-b"});
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(more.status().message().find("stoker keygen --role client --name team-b"), std::string::npos)
      << more.status().ToString();
}

}  // namespace
}  // namespace stoker::tools
