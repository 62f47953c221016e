// Loading S3 credentials (credentials.h). Every message here names a key, a profile or a file, never a value.
#include "storage/credentials.h"

#include <fstream>
#include <sstream>

namespace stoker::storage {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

const char* NonEmpty(const GetEnvFunction& getenv, const char* name) {
  const char* v = getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

}  // namespace

StatusOr<S3Credentials> ParseCredentialsFile(std::string_view text, const std::string& profile) {
  S3Credentials out;
  bool in_profile = false, found = false;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = Trim(text.substr(pos, end - pos));
    pos = end + 1;
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      if (line.back() != ']') {
        in_profile = false;
        continue;
      }
      std::string_view name = Trim(line.substr(1, line.size() - 2));
      if (name.starts_with("profile ")) name = Trim(name.substr(8));  // the config file's spelling
      in_profile = name == profile;
      found = found || in_profile;
      continue;
    }
    if (!in_profile) continue;
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view key = Trim(line.substr(0, eq));
    std::string value(Trim(line.substr(eq + 1)));
    if (key == "aws_access_key_id") out.access_key_id = value;
    if (key == "aws_secret_access_key") out.secret_access_key = Secret(std::move(value));
    else if (key == "aws_session_token") out.session_token = Secret(std::move(value));
  }
  if (!found) return NotFoundError("no [" + profile + "] profile in the credentials file");
  if (out.access_key_id.empty() || out.secret_access_key.empty()) {
    return InvalidArgumentError("profile '" + profile +
                                "' in the credentials file needs both aws_access_key_id and aws_secret_access_key");
  }
  return out;
}

StatusOr<S3Credentials> LoadS3Credentials(const GetEnvFunction& getenv, const std::string& file,
                                          const std::string& profile_flag) {
  const char* key = NonEmpty(getenv, "AWS_ACCESS_KEY_ID");
  const char* secret = NonEmpty(getenv, "AWS_SECRET_ACCESS_KEY");
  if ((key == nullptr) != (secret == nullptr)) {
    return InvalidArgumentError(std::string("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together (only ") +
                                (key ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY") + " is set)");
  }
  if (key != nullptr) {
    S3Credentials c;
    c.access_key_id = key;
    c.secret_access_key = Secret(secret);
    if (const char* token = NonEmpty(getenv, "AWS_SESSION_TOKEN")) c.session_token = Secret(token);
    c.source = "environment";
    return c;
  }
  std::string path = file;
  bool explicit_file = !path.empty();
  if (path.empty()) {
    if (const char* f = NonEmpty(getenv, "AWS_SHARED_CREDENTIALS_FILE")) {
      path = f;
      explicit_file = true;
    } else if (const char* home = NonEmpty(getenv, "HOME")) {
      path = std::string(home) + "/.aws/credentials";
    }
  }
  std::string profile = profile_flag;
  if (profile.empty()) profile = NonEmpty(getenv, "AWS_PROFILE") ? getenv("AWS_PROFILE") : "default";
  if (!path.empty()) {
    std::ifstream in(path);
    if (in) {
      std::stringstream text;
      text << in.rdbuf();
      auto c = ParseCredentialsFile(text.str(), profile);
      if (!c.ok()) return c.status().WithContext(path);
      c->source = "file " + path + " (profile " + profile + ")";
      return c;
    }
    if (explicit_file) return NotFoundError("cannot read the credentials file " + path);
  }
  S3Credentials none;
  none.source = "none (requests are not signed)";
  return none;
}

}  // namespace stoker::storage
