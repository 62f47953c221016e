// CURVE keys (keys.h): generating, writing and reading key pairs and trust files, loading a process's security.
#include "auth/keys.h"

#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <zmq.h>

#include "base/logging.h"

namespace stoker {
namespace {

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool ValidZ85Key(const std::string& z85) {
  if (z85.size() != 40) return false;
  uint8_t decoded[32];
  return zmq_z85_decode(decoded, z85.c_str()) != nullptr;
}

std::string Trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r") - begin + 1);
}

StatusOr<std::string> ReadText(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) return FailedPreconditionError(std::string("cannot read the ") + what + " file " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The text of a file named by `file`, or by the environment (`text_env` holds the text itself, `file_env` a path).
StatusOr<std::optional<std::pair<std::string, std::string>>> Source(const std::string& file, const char* text_env,
                                                                    const char* file_env, const char* what) {
  using Found = std::optional<std::pair<std::string, std::string>>;
  if (!file.empty()) {
    STOKER_ASSIGN_OR_RETURN(std::string text, ReadText(file, what));
    return Found({text, file});
  }
  if (const char* text = std::getenv(text_env); text != nullptr && text[0] != '\0') {
    return Found({text, std::string("$") + text_env});
  }
  if (const char* path = std::getenv(file_env); path != nullptr && path[0] != '\0') {
    STOKER_ASSIGN_OR_RETURN(std::string text, ReadText(path, what));
    return Found({text, path});
  }
  return Found();
}

// Calls `parse` with each line of a key or trust file that says something (trimmed; not blank, not a # comment)
// and its number, up to the first error.
Status ForEachLineThatSays(const std::string& text, const std::function<Status(int, const std::string&)>& parse) {
  std::istringstream lines(text);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    ++n;
    line = Trim(line);
    if (line.empty() || line[0] == '#') continue;
    STOKER_RETURN_IF_ERROR(parse(n, line));
  }
  return Status::Ok();
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kCoordinator: return "coordinator";
    case Role::kWorker: return "worker";
    case Role::kClient: return "client";
  }
  return "unknown";
}

StatusOr<Role> ParseRole(const std::string& text) {
  if (text == "coordinator") return Role::kCoordinator;
  if (text == "worker") return Role::kWorker;
  if (text == "client") return Role::kClient;
  return InvalidArgumentError("role '" + text + "' is not one of coordinator, worker, client");
}

StatusOr<KeyPair> GenerateKeyPair(Role role, const std::string& name) {
  if (!ValidName(name)) return InvalidArgumentError("key name '" + name + "' must be 1-64 characters of [A-Za-z0-9._-]");
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0) {
    return UnimplementedError("this libzmq has no CURVE (built without libsodium): keys cannot be made");
  }
  return KeyPair{role, name, pub, sec};
}

StatusOr<KeyPair> ReadKeyFile(const std::string& path) {
  STOKER_ASSIGN_OR_RETURN(std::string text, ReadText(path, "key"));
  return ParseKeyPair(text, path);
}

std::string FormatKeyPair(const KeyPair& key) {
  std::ostringstream out;
  out << "# stoker CURVE key pair of a " << RoleName(key.role) << " (stoker keygen). Secret: give it only to "
      << RoleName(key.role) << " processes; never commit it.\n"
      << "role = " << RoleName(key.role) << "\nname = " << key.name << "\npublic = " << key.public_z85
      << "\nsecret = " << key.secret_z85 << "\n";
  return out.str();
}

StatusOr<KeyPair> ParseKeyPair(const std::string& text, const std::string& source) {
  KeyPair key;
  std::string role;
  STOKER_RETURN_IF_ERROR(ForEachLineThatSays(text, [&](int n, const std::string& line) -> Status {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) return InvalidArgumentError(source + ": line " + std::to_string(n) + " is not 'field = value'");
    const std::string field = Trim(line.substr(0, eq));
    const std::string value = Trim(line.substr(eq + 1));
    if (field == "role") role = value;
    else if (field == "name") key.name = value;
    else if (field == "public") key.public_z85 = value;
    else if (field == "secret") key.secret_z85 = value;
    else return InvalidArgumentError(source + ": line " + std::to_string(n) + ": unknown field '" + field + "'");
    return Status::Ok();
  }));
  auto parsed_role = ParseRole(role);
  if (!parsed_role.ok()) return parsed_role.status().WithContext(source);
  key.role = *parsed_role;
  if (!ValidName(key.name)) return InvalidArgumentError(source + ": the name must be 1-64 characters of [A-Za-z0-9._-]");
  if (!ValidZ85Key(key.public_z85)) return InvalidArgumentError(source + ": the public key is not 40 z85 characters");
  if (!ValidZ85Key(key.secret_z85)) return InvalidArgumentError(source + ": the secret key is not 40 z85 characters");
  char derived[41];
  if (zmq_curve_public(derived, key.secret_z85.c_str()) != 0 || key.public_z85 != derived) {
    return InvalidArgumentError(source + ": the public key is not the secret key's");
  }
  return key;
}

std::string TrustLine(const KeyPair& key) {
  return std::string(RoleName(key.role)) + " " + key.name + " " + key.public_z85 + "\n";
}

StatusOr<std::vector<TrustedKey>> ParseTrust(const std::string& text, const std::string& source) {
  std::vector<TrustedKey> keys;
  STOKER_RETURN_IF_ERROR(ForEachLineThatSays(text, [&](int n, const std::string& line) -> Status {
    std::istringstream fields(line);
    std::string role, name, key, extra;
    fields >> role >> name >> key;
    const std::string where = source + ": line " + std::to_string(n);
    if (key.empty() || (fields >> extra)) return InvalidArgumentError(where + " is not '<role> <name> <public key>'");
    auto parsed_role = ParseRole(role);
    if (!parsed_role.ok()) return parsed_role.status().WithContext(where);
    if (!ValidName(name)) return InvalidArgumentError(where + ": the name must be 1-64 characters of [A-Za-z0-9._-]");
    if (!ValidZ85Key(key)) return InvalidArgumentError(where + ": the public key is not 40 z85 characters");
    keys.push_back({*parsed_role, name, key});
    return Status::Ok();
  }));
  return keys;
}

std::vector<TrustedKey> Security::Trusted(Role role) const {
  std::vector<TrustedKey> out;
  for (const TrustedKey& k : trusted) {
    if (k.role == role) out.push_back(k);
  }
  return out;
}

StatusOr<Security> LoadSecurity(Role role, const KeySources& sources) {
  Security security;
  const char* insecure_env = std::getenv("STOKER_INSECURE");
  const std::string insecure_text = insecure_env == nullptr ? "" : insecure_env;
  // The same spellings a boolean flag takes, so STOKER_INSECURE means the same to a process and to the library.
  const bool insecure_set = insecure_text == "1" || insecure_text == "true" || insecure_text == "yes" ||
                            insecure_text == "on";
  if (sources.insecure || insecure_set) {
    STOKER_LOG(kWarning) << "CURVE is off (--insecure): any peer that reaches this process's ports is trusted, and "
                            "traffic travels in clear text; use it only on a network you trust";
    security.insecure = true;
    return security;
  }
  STOKER_ASSIGN_OR_RETURN(auto key, Source(sources.key_file, "STOKER_KEY", "STOKER_KEY_FILE", "key"));
  if (!key) {
    return FailedPreconditionError(std::string("no key for this ") + RoleName(role) +
                                   ": pass --key-file (make one with `stoker keygen --role " + RoleName(role) +
                                   "`), or set $STOKER_KEY_FILE or $STOKER_KEY; or turn CURVE off with --insecure "
                                   "on a network you trust");
  }
  STOKER_ASSIGN_OR_RETURN(security.own, ParseKeyPair(key->first, key->second));
  if (security.own.role != role) {
    return FailedPreconditionError(key->second + " is a " + RoleName(security.own.role) + " key; this process is a " +
                                   RoleName(role));
  }
  STOKER_ASSIGN_OR_RETURN(auto trust, Source(sources.trust_file, "STOKER_TRUST", "STOKER_TRUST_FILE", "trust"));
  if (!trust) {
    return FailedPreconditionError(std::string("no trust file for this ") + RoleName(role) +
                                   ": pass --trust-file (the public keys of the coordinator, workers and clients), "
                                   "or set $STOKER_TRUST_FILE or $STOKER_TRUST");
  }
  STOKER_ASSIGN_OR_RETURN(security.trusted, ParseTrust(trust->first, trust->second));
  return security;
}

std::optional<PeerIdentity> ParseIdentity(const std::string& user_id) {
  const size_t colon = user_id.find(':');
  if (colon == std::string::npos) return std::nullopt;
  auto role = ParseRole(user_id.substr(0, colon));
  if (!role.ok()) return std::nullopt;
  return PeerIdentity{*role, user_id.substr(colon + 1)};
}

}  // namespace stoker
