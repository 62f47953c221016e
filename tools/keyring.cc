// Keyrings on disk (keyring.h).
#include "tools/keyring.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "base/env.h"

namespace stoker::tools {

namespace {
// Writes `text` to the file `open_flags` and `mode` open at `path` (`what`: how errors say it) in one write; a short
// write is an error.
Status WriteText(const std::string& path, int open_flags, mode_t mode, const std::string& text, const char* what) {
  const std::string cannot = std::string("cannot ") + what + " " + path + ": ";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | open_flags, mode);
  if (fd < 0) return FailedPreconditionError(cannot + std::strerror(errno));
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int write_errno = errno;
  const bool closed = ::close(fd) == 0;
  if (n != static_cast<ssize_t>(text.size())) {
    return UnavailableError(cannot + (n < 0 ? std::strerror(write_errno) : "a short write"));
  }
  if (!closed) return UnavailableError(cannot + std::strerror(errno));
  return Status::Ok();
}
}  // namespace

Status WriteKeyFile(const std::string& path, const KeyPair& key) {
  return WriteText(path, O_CREAT | O_EXCL, 0600, FormatKeyPair(key), "write");
}

// A trust file it creates is never writable by group or others, whatever the umask (0644 at most): such a file would
// be refused (auth/keys.h). One that exists is appended to as it is.
Status AppendTrustLine(const std::string& path, const KeyPair& key) {
  return WriteText(path, O_CREAT | O_APPEND, 0644, TrustLine(key), "append to");
}

std::vector<std::string> Keyring::Flags(Role role) const {
  const std::string& key = role == Role::kCoordinator ? coordinator_key : role == Role::kWorker ? worker_key : client_key;
  return {"--key-file", key, "--trust-file", trust};
}

StatusOr<Keyring> MakeKeyring(const std::string& dir, const std::vector<std::string>& teams) {
  Keyring k{dir, JoinPath(dir, "coordinator.key"), JoinPath(dir, "worker.key"),
            teams.empty() ? JoinPath(dir, "client.key") : "", JoinPath(dir, "trust"), {}};
  // Every key pair with its file, made in memory first: a bad or repeated team name leaves nothing behind.
  std::vector<std::pair<KeyPair, std::string>> keys;
  auto add = [&keys](Role role, const std::string& name, const std::string& path) -> Status {
    STOKER_ASSIGN_OR_RETURN(KeyPair key, GenerateKeyPair(role, name));
    keys.emplace_back(std::move(key), path);
    return Status::Ok();
  };
  STOKER_RETURN_IF_ERROR(add(Role::kCoordinator, "local", k.coordinator_key));
  STOKER_RETURN_IF_ERROR(add(Role::kWorker, "local", k.worker_key));
  if (teams.empty()) STOKER_RETURN_IF_ERROR(add(Role::kClient, "local", k.client_key));
  for (const std::string& team : teams) {
    const std::string path = JoinPath(dir, "client-" + team + ".key");
    if (!k.team_keys.emplace(team, path).second) return InvalidArgumentError("team '" + team + "' is named twice");
    STOKER_RETURN_IF_ERROR(add(Role::kClient, team, path).WithContext("team"));
  }
  PosixEnv env;
  STOKER_RETURN_IF_ERROR(env.CreateDirectories(dir));
  auto exists = [&env](const std::string& path) {
    auto found = env.Stat(path);
    return found.ok() && found->exists;
  };
  if (exists(k.trust)) {
    for (const auto& [key, path] : keys) {
      if (exists(path)) continue;
      std::string fix = "make the keyring in a new directory";
      if (!teams.empty() && key.role == Role::kClient) {
        fix += ", or add the team's key: stoker keygen --role client --name " + key.name + " --out " + dir +
               " --trust " + k.trust;
      }
      return FailedPreconditionError(k.trust + " exists but " + path + " does not: " + fix);
    }
    return k;
  }
  std::string trust = "# the public keys of a local stoker cluster (stoker keygen)\n";
  for (const auto& [key, path] : keys) {
    std::remove(path.c_str());
    STOKER_RETURN_IF_ERROR(WriteKeyFile(path, key));
    trust += TrustLine(key);
  }
  STOKER_RETURN_IF_ERROR(env.WriteFileAtomically(k.trust, trust.data(), trust.size()));
  return k;
}

}  // namespace stoker::tools
