// S3 credentials: where they come from and how they are kept out of sight. They are read from the standard AWS
// environment variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) or, failing those, from an
// AWS shared-credentials file (INI, one [profile] per section). The secret and the session token live in a Secret,
// which has no stream operator and no ToString, and no error message built here ever contains a value: a bad
// credential can be named ("the secret for profile 'x' is empty") but never printed.
//
// Thread safety: values and pure functions.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "stoker/status.h"

namespace stoker::storage {

// A string that must never reach a log, an error, /state or a metric label. Only the signer reads it (reveal()).
class Secret {
 public:
  Secret() = default;
  explicit Secret(std::string value) : value_(std::move(value)) {}
  bool empty() const { return value_.empty(); }
  const std::string& reveal() const { return value_; }

 private:
  std::string value_;
};

struct S3Credentials {
  std::string access_key_id;  // not secret (it appears in every signed request), but logged only as a prefix
  Secret secret_access_key;
  Secret session_token;       // temporary credentials (STS): sent as x-amz-security-token
  std::string source;         // where they came from, for people: "environment", "file /x (profile p)", "none"

  // No credentials at all: requests go unsigned (public buckets, plain web servers).
  bool anonymous() const { return access_key_id.empty(); }
};

// Reads a value of the environment; tests pass their own.
using GetEnvFunction = std::function<const char*(const char*)>;

// The profile's credentials in an AWS shared-credentials file's text. NotFound without the profile;
// InvalidArgument when a key is missing. Messages name keys and profiles, never values.
StatusOr<S3Credentials> ParseCredentialsFile(std::string_view text, const std::string& profile);

// Environment first (both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither), then `file` (empty: the
// environment's AWS_SHARED_CREDENTIALS_FILE, else $HOME/.aws/credentials if it exists), else anonymous. `profile`
// empty: $AWS_PROFILE, else "default".
StatusOr<S3Credentials> LoadS3Credentials(const GetEnvFunction& getenv, const std::string& file,
                                          const std::string& profile);

}  // namespace stoker::storage
