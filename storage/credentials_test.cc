// S3 credentials: environment first, then the shared file by profile; errors name keys, never values.
#include "storage/credentials.h"

#include <gtest/gtest.h>

#include <map>

#include "tests/support/temp_dir.h"

namespace stoker::storage {
namespace {

GetEnvFunction FakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(Credentials, EnvironmentWins) {
  auto c = LoadS3Credentials(FakeEnv({{"AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"},
                                      {"AWS_SECRET_ACCESS_KEY", "very-secret-value"},
                                      {"AWS_SESSION_TOKEN", "token-value"}}),
                             "", "");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key_id, "AKIDEXAMPLE");
  EXPECT_EQ(c->secret_access_key.reveal(), "very-secret-value");
  EXPECT_EQ(c->session_token.reveal(), "token-value");
  EXPECT_EQ(c->source, "environment");
}

TEST(Credentials, HalfSetEnvironmentIsAnErrorWithoutTheValue) {
  auto c = LoadS3Credentials(FakeEnv({{"AWS_SECRET_ACCESS_KEY", "very-secret-value"}}), "", "");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message().find("very-secret-value"), std::string::npos) << c.status().message();
}

TEST(Credentials, FileByProfile) {
  testing::TempDir dir;
  dir.Write("creds", "# comment\n[default]\naws_access_key_id = DEF\naws_secret_access_key = def-secret\n\n"
                     "[profile train]\n  aws_access_key_id=TRAIN \r\naws_secret_access_key= train-secret\n"
                     "aws_session_token = tok\n");
  auto c = LoadS3Credentials(FakeEnv({{"AWS_PROFILE", "train"}}), dir.Join("creds"), "");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key_id, "TRAIN");
  EXPECT_EQ(c->secret_access_key.reveal(), "train-secret");
  EXPECT_EQ(c->session_token.reveal(), "tok");
  auto d = LoadS3Credentials(FakeEnv({{"AWS_SHARED_CREDENTIALS_FILE", dir.Join("creds")}}), "", "");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->access_key_id, "DEF");
  auto missing = LoadS3Credentials(FakeEnv({}), dir.Join("creds"), "nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto no_file = LoadS3Credentials(FakeEnv({}), dir.Join("absent"), "");
  EXPECT_EQ(no_file.status().code(), StatusCode::kNotFound);
}

TEST(Credentials, MalformedFilesNeverEchoValues) {
  for (const char* text : {"[default]\naws_access_key_id = only-the-key-value\n", "[default\nx", "", "\xff\xfe[",
                           "[default]\naws_secret_access_key = lonely-secret-value\n"}) {
    auto c = ParseCredentialsFile(text, "default");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_EQ(c.status().message().find("value"), std::string::npos) << c.status().message();
  }
}

TEST(Credentials, NoneMeansAnonymous) {
  auto c = LoadS3Credentials(FakeEnv({}), "", "");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->anonymous());
}

}  // namespace
}  // namespace stoker::storage
