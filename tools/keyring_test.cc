// Keyrings on disk (keyring.h): what `stoker keygen` writes is what the processes accept, whatever the umask.
#include "tools/keyring.h"

#include <sys/stat.h>

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

}  // namespace
}  // namespace stoker::tools
