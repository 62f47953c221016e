// CURVE keys (keys.h): generating, writing and reading key pairs and trust files, loading a process's security.
#include "auth/keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
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

// How an error names a file: its path, unless the "path" looks like a key's text given by mistake (a line break,
// an '=', a control character, or 40 z85 characters that are no file): that is never echoed.
std::string Shown(const std::string& path) {
  bool text_like = path.size() > 4096;
  for (char c : path) text_like |= c == '\n' || c == '=' || static_cast<unsigned char>(c) < 0x20;
  if (!text_like && path.size() == 40 && ValidZ85Key(path) && ::access(path.c_str(), F_OK) != 0) text_like = true;
  return text_like ? "(a value that looks like key text, not a file name: not shown)" : path;
}

bool InOurGroups(gid_t gid) {
  if (gid == ::getegid()) return true;
  gid_t groups[256];
  const int n = ::getgroups(256, groups);
  for (int i = 0; i < n; ++i) {
    if (groups[i] == gid) return true;
  }
  return false;
}

std::string Octal(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "0%03o", static_cast<unsigned>(mode & 0777));
  return text;
}

// A secret key file others can read (or anyone but its owner can write) is refused unless `allow_readable`. One
// only its group can read is how Kubernetes mounts a Secret for a pod's fsGroup (owner root, group the pod's):
// accepted when that group is ours and the owner is not us; otherwise accepted with a warning. `shown`: the path as
// errors may show it.
Status CheckKeyFileMode(const std::string& shown, const struct stat& st, bool allow_readable) {
  const std::string how = "key file " + shown + " (mode " + Octal(st.st_mode) + ")";
  if ((st.st_mode & (S_IROTH | S_IWOTH | S_IWGRP)) != 0) {
    if (!allow_readable) {
      return FailedPreconditionError(how + " can be read or written by other users: `chmod 600` it, or pass "
                                     "--allow-readable-key (or set STOKER_ALLOW_READABLE_KEY=1) to use it anyway");
    }
    STOKER_LOG(kWarning) << "SECURITY: " << how << " can be read or written by other users; used because of "
                         << "--allow-readable-key";
  } else if ((st.st_mode & S_IRGRP) != 0 && (st.st_uid == ::geteuid() || !InOurGroups(st.st_gid))) {
    STOKER_LOG(kWarning) << "SECURITY: " << how << " can be read by every member of group " << st.st_gid
                         << ": `chmod 600` it unless the group is meant to share it";
  }
  return Status::Ok();
}

// A trust file decides whose keys are let in: one that anyone but its owner can write lets them add their own, so
// it is refused unless `allow_writable` (then a warning). Reading it is harmless: it holds public keys only.
Status CheckTrustFileMode(const std::string& shown, const struct stat& st, bool allow_writable) {
  if ((st.st_mode & (S_IWOTH | S_IWGRP)) == 0) return Status::Ok();
  const std::string how = "trust file " + shown + " (mode " + Octal(st.st_mode) + ")";
  if (!allow_writable) {
    return FailedPreconditionError(how + " can be written by other users, who could add their own keys to it: "
                                   "`chmod 644` it, or pass --allow-readable-key (or set "
                                   "STOKER_ALLOW_READABLE_KEY=1) to use it anyway");
  }
  STOKER_LOG(kWarning) << "SECURITY: " << how << " can be written by other users, who could add their own keys to "
                       << "it; used because of --allow-readable-key";
  return Status::Ok();
}

// A key or trust file's text (`what`), after `check` approves its mode. The mode checked is that of the file read
// (fstat of the one descriptor), not of whatever the path named a moment before. Blocking open: a key may come
// through a pipe (`--key-file <(vault read ...)`). At most `max_bytes`.
StatusOr<std::string> ReadCheckedText(const std::string& path, const char* what, size_t max_bytes,
                                      const std::function<Status(const std::string&, const struct stat&)>& check) {
  const std::string shown = Shown(path);
  const std::string cannot = std::string("cannot read the ") + what + " file " + shown;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return FailedPreconditionError(cannot);
  struct stat st {};
  Status status = ::fstat(fd, &st) == 0 ? check(shown, st) : FailedPreconditionError(cannot);
  std::string text;
  while (status.ok()) {
    char buffer[4096];
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) status = FailedPreconditionError(cannot);
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > max_bytes) status = InvalidArgumentError(shown + " is too large for a " + what + " file");
  }
  ::close(fd);
  if (!status.ok()) return status;
  return text;
}

StatusOr<std::string> ReadKeyText(const std::string& path, bool allow_readable) {
  return ReadCheckedText(path, "key", 64 << 10, [&](const std::string& shown, const struct stat& st) {
    return CheckKeyFileMode(shown, st, allow_readable);
  });
}

StatusOr<std::string> ReadTrustText(const std::string& path, bool allow_writable) {
  return ReadCheckedText(path, "trust", 16 << 20, [&](const std::string& shown, const struct stat& st) {
    return CheckTrustFileMode(shown, st, allow_writable);
  });
}

// Whether the environment variable `name` is set to true, in the spellings a boolean flag takes (1, true, yes,
// on), so that a variable means the same to a process and to the library.
bool EnvIsTrue(const char* name) {
  const char* text = std::getenv(name);
  const std::string value = text == nullptr ? "" : text;
  return value == "1" || value == "true" || value == "yes" || value == "on";
}

// The text of a file named by `file`, or by the environment (`text_env` holds the text itself, `file_env` a path).
// A file's mode is checked first (`allow_readable`: see CheckKeyFileMode and CheckTrustFileMode).
StatusOr<std::optional<std::pair<std::string, std::string>>> Source(const std::string& file, const char* text_env,
                                                                    const char* file_env, const char* what,
                                                                    bool allow_readable) {
  using Found = std::optional<std::pair<std::string, std::string>>;
  auto read = [&](const std::string& path) -> StatusOr<std::string> {
    if (std::string(what) == "key") return ReadKeyText(path, allow_readable);
    return ReadTrustText(path, allow_readable);
  };
  if (!file.empty()) {
    STOKER_ASSIGN_OR_RETURN(std::string text, read(file));
    return Found({text, Shown(file)});
  }
  if (const char* text = std::getenv(text_env); text != nullptr && text[0] != '\0') {
    return Found({text, std::string("$") + text_env});
  }
  if (const char* path = std::getenv(file_env); path != nullptr && path[0] != '\0') {
    STOKER_ASSIGN_OR_RETURN(std::string text, read(path));
    return Found({text, Shown(path)});
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

StatusOr<KeyPair> ReadKeyFile(const std::string& path, bool allow_readable) {
  STOKER_ASSIGN_OR_RETURN(std::string text, ReadKeyText(path, allow_readable));
  return ParseKeyPair(text, Shown(path));
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
    else return InvalidArgumentError(source + ": line " + std::to_string(n) + " has an unknown field (not shown)");
    return Status::Ok();
  }));
  auto parsed_role = ParseRole(role);
  if (!parsed_role.ok()) return InvalidArgumentError(source + ": the role is not one of coordinator, worker, client");
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

bool InsecureAsked(const KeySources& sources) { return sources.insecure || EnvIsTrue("STOKER_INSECURE"); }

StatusOr<Security> LoadSecurity(Role role, const KeySources& sources, std::optional<Role> or_role) {
  Security security;
  if (InsecureAsked(sources)) {
    STOKER_LOG(kWarning) << "CURVE is off (--insecure): any peer that reaches this process's ports is trusted, and "
                            "traffic travels in clear text; use it only on a network you trust";
    security.insecure = true;
    return security;
  }
  const bool allow_readable = sources.allow_readable_key || EnvIsTrue("STOKER_ALLOW_READABLE_KEY");
  STOKER_ASSIGN_OR_RETURN(auto key, Source(sources.key_file, "STOKER_KEY", "STOKER_KEY_FILE", "key", allow_readable));
  if (!key) {
    return FailedPreconditionError(std::string("no key for this ") + RoleName(role) +
                                   ": pass --key-file (make one with `stoker keygen --role " + RoleName(role) +
                                   "`), or set $STOKER_KEY_FILE or $STOKER_KEY; or turn CURVE off with --insecure "
                                   "on a network you trust");
  }
  STOKER_ASSIGN_OR_RETURN(security.own, ParseKeyPair(key->first, key->second));
  if (security.own.role != role && security.own.role != or_role) {
    return FailedPreconditionError(key->second + " is a " + RoleName(security.own.role) + " key; this process is a " +
                                   RoleName(role));
  }
  STOKER_ASSIGN_OR_RETURN(auto trust,
                          Source(sources.trust_file, "STOKER_TRUST", "STOKER_TRUST_FILE", "trust", allow_readable));
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
