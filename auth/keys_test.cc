// Key files (keys.h): a key file others can read is refused unless allowed, and no error ever shows a file's
// content, nor key text passed where a file name belongs.
#include "auth/keys.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/support/temp_dir.h"

namespace stoker {
namespace {

class KeyFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"STOKER_KEY", "STOKER_KEY_FILE", "STOKER_TRUST", "STOKER_TRUST_FILE", "STOKER_INSECURE",
                             "STOKER_ALLOW_READABLE_KEY"}) {
      ::unsetenv(name);
    }
    auto key = GenerateKeyPair(Role::kWorker, "w");
    ASSERT_TRUE(key.ok());
    key_ = *key;
    trust_ = dir_.Write("trust", TrustLine(key_));
  }
  std::string KeyFile(mode_t mode) {
    const std::string path = dir_.Write("worker.key", FormatKeyPair(key_));
    EXPECT_EQ(::chmod(path.c_str(), mode), 0);
    return path;
  }

  testing::TempDir dir_;
  KeyPair key_;
  std::string trust_;
};

// Regression: a 0644 key was accepted silently.
TEST_F(KeyFileTest, AKeyOthersCanReadIsRefusedUnlessAllowed) {
  const std::string path = KeyFile(0644);
  auto refused = LoadSecurity(Role::kWorker, {.key_file = path, .trust_file = trust_});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  const std::string message(refused.status().message());
  EXPECT_NE(message.find("chmod 600"), std::string::npos) << message;
  EXPECT_NE(message.find("--allow-readable-key"), std::string::npos) << message;
  EXPECT_NE(message.find("0644"), std::string::npos) << message;
  EXPECT_FALSE(ReadKeyFile(path).ok());
  EXPECT_TRUE(LoadSecurity(Role::kWorker, {.key_file = path, .trust_file = trust_, .allow_readable_key = true}).ok());
  ::setenv("STOKER_ALLOW_READABLE_KEY", "1", 1);
  EXPECT_TRUE(LoadSecurity(Role::kWorker, {.key_file = path, .trust_file = trust_}).ok());
  ::unsetenv("STOKER_ALLOW_READABLE_KEY");
  EXPECT_FALSE(LoadSecurity(Role::kWorker, {.key_file = KeyFile(0620), .trust_file = trust_}).ok());  // g+w
}

// Review of issue 29: nothing checked the trust file, so anyone who could write it could let their own key in. One
// that others can write is refused unless allowed; one that everyone can read is fine (it holds public keys only).
TEST_F(KeyFileTest, ATrustFileOthersCanWriteIsRefusedUnlessAllowed) {
  const std::string key = KeyFile(0600);
  for (mode_t mode : {0664, 0646, 0666}) {
    ASSERT_EQ(::chmod(trust_.c_str(), mode), 0);
    auto refused = LoadSecurity(Role::kWorker, {.key_file = key, .trust_file = trust_});
    ASSERT_FALSE(refused.ok()) << std::oct << mode;
    EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
    const std::string message(refused.status().message());
    EXPECT_NE(message.find("trust file " + trust_), std::string::npos) << message;
    EXPECT_NE(message.find("can be written by other users"), std::string::npos) << message;
    EXPECT_NE(message.find("chmod 644"), std::string::npos) << message;
    EXPECT_TRUE(LoadSecurity(Role::kWorker, {.key_file = key, .trust_file = trust_, .allow_readable_key = true}).ok());
  }
  ::setenv("STOKER_TRUST_FILE", trust_.c_str(), 1);
  EXPECT_FALSE(LoadSecurity(Role::kWorker, {.key_file = key}).ok()) << "named by the environment, the same";
  ::unsetenv("STOKER_TRUST_FILE");
  for (mode_t mode : {0644, 0444, 0600}) {
    ASSERT_EQ(::chmod(trust_.c_str(), mode), 0);
    EXPECT_TRUE(LoadSecurity(Role::kWorker, {.key_file = key, .trust_file = trust_}).ok()) << std::oct << mode;
  }
}

TEST_F(KeyFileTest, AKeyOnlyItsOwnerOrGroupCanReadIsAccepted) {
  EXPECT_TRUE(LoadSecurity(Role::kWorker, {.key_file = KeyFile(0600), .trust_file = trust_}).ok());
  EXPECT_TRUE(LoadSecurity(Role::kWorker, {.key_file = KeyFile(0400), .trust_file = trust_}).ok());
  // Group-readable (a Kubernetes Secret mounted for the pod's fsGroup is 0440): accepted, with a warning here.
  EXPECT_TRUE(LoadSecurity(Role::kWorker, {.key_file = KeyFile(0440), .trust_file = trust_}).ok());
}

// The mode checked is that of the file read, and a key may come through a pipe (`--key-file <(vault read ...)`):
// a pipe is its owner's alone, so it is read; a device others can read is refused, and when insisted on, read only
// up to a key file's size (reading /dev/zero never ended).
TEST_F(KeyFileTest, AKeyThroughAPipeIsReadAndADeviceIsNeverReadWhole) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string text = FormatKeyPair(key_);
  ASSERT_EQ(::write(fds[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fds[1]);
  auto piped = ReadKeyFile("/dev/fd/" + std::to_string(fds[0]));
  ::close(fds[0]);
  ASSERT_TRUE(piped.ok()) << piped.status().ToString();
  EXPECT_EQ(piped->secret_z85, key_.secret_z85);
  EXPECT_EQ(ReadKeyFile("/dev/zero").status().code(), StatusCode::kFailedPrecondition);  // mode 0666
  auto insisted = ReadKeyFile("/dev/zero", /*allow_readable=*/true);
  ASSERT_FALSE(insisted.ok());
  EXPECT_NE(insisted.status().message().find("too large for a key file"), std::string::npos)
      << insisted.status().ToString();
}

// Regression: key text passed by mistake as --key-file was printed whole in the error.
TEST_F(KeyFileTest, KeyTextGivenAsAFileNameIsNeverEchoed) {
  for (const std::string& text : {FormatKeyPair(key_), key_.secret_z85}) {
    auto refused = LoadSecurity(Role::kWorker, {.key_file = text, .trust_file = trust_});
    ASSERT_FALSE(refused.ok());
    const std::string message = refused.status().ToString();
    EXPECT_EQ(message.find(key_.secret_z85), std::string::npos) << "the secret leaked into: " << message;
    EXPECT_NE(message.find("not shown"), std::string::npos) << message;
  }
  // A file that is not a key file: what its lines say is not repeated either.
  const std::string other = dir_.Write("other", "password = hunter2-" + key_.secret_z85 + "\n");
  ::chmod(other.c_str(), 0600);
  auto refused = ReadKeyFile(other);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().ToString().find("password"), std::string::npos) << refused.status().ToString();
  EXPECT_EQ(refused.status().ToString().find(key_.secret_z85), std::string::npos);
}

}  // namespace
}  // namespace stoker
