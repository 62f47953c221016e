// The local group file: read, or made once (base/local_group.h).
#include "base/local_group.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace stoker {

namespace {

constexpr size_t kGroupBytes = 16;  // 32 hex digits

StatusOr<std::string> NewGroup() {
  unsigned char raw[kGroupBytes];
  size_t got = 0;
  while (got < sizeof(raw)) {
    const ssize_t n = ::getrandom(raw + got, sizeof(raw) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return InternalError(std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string text;
  for (unsigned char c : raw) {
    text.push_back(kHex[c >> 4]);
    text.push_back(kHex[c & 15]);
  }
  return text;
}

// The group in `path`, checked; NotFound if there is no such file.
StatusOr<std::string> ReadGroup(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFoundError(path + " does not exist");
    return FailedPreconditionError("cannot open the local group file " + path + ": " + std::strerror(errno));
  }
  struct stat st {};
  std::string text(2 * kGroupBytes + 1, '\0');
  ssize_t n = -1;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) n = ::read(fd, text.data(), text.size());
  ::close(fd);
  if (!S_ISREG(st.st_mode)) return FailedPreconditionError("the local group file " + path + " is not a file");
  if (st.st_uid != ::geteuid()) {
    return PermissionDeniedError("the local group file " + path + " belongs to another user (uid " +
                                 std::to_string(st.st_uid) + "): node-local workers and their client run as one user");
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return PermissionDeniedError("the local group file " + path + " may be read or written by others (mode " +
                                 mode + "): it must be 0600");
  }
  if (n < 0) return FailedPreconditionError("cannot read the local group file " + path);
  text.resize(static_cast<size_t>(n));
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (!IsLocalGroup(text)) return FailedPreconditionError("the local group file " + path + " is malformed");
  return text;
}

}  // namespace

bool IsLocalGroup(const std::string& text) {
  if (text.size() != 2 * kGroupBytes) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

StatusOr<std::string> ReadOrMakeLocalGroup(const std::string& dir) {
  if (dir.empty() || dir.front() != '/') return InvalidArgumentError("the local directory must be an absolute path");
  const std::string path = dir + "/" + kLocalGroupFile;
  StatusOr<std::string> existing = ReadGroup(path);
  if (existing.ok() || existing.status().code() != StatusCode::kNotFound) return existing;
  STOKER_ASSIGN_OR_RETURN(std::string group, NewGroup());
  const std::string temp = path + ".new." + std::to_string(::getpid()) + "." + std::to_string(::gettid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return FailedPreconditionError("cannot make the local group file in " + dir + ": " + std::strerror(errno));
  }
  const std::string line = group + "\n";
  const bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) && ::fsync(fd) == 0;
  ::close(fd);
  // link() never replaces: of two makers at once, one links and the other reads what the first made.
  const int linked = written ? ::link(temp.c_str(), path.c_str()) : -1;
  const int link_errno = errno;
  ::unlink(temp.c_str());
  if (!written) return FailedPreconditionError("cannot write the local group file in " + dir);
  if (linked != 0 && link_errno != EEXIST) {
    return FailedPreconditionError("cannot make the local group file in " + dir + ": " + std::strerror(link_errno));
  }
  return ReadGroup(path);
}

bool IpcEndpointIn(const std::string& endpoint, const std::string& dir) {
  const std::string prefix = "ipc://" + dir + "/";
  if (endpoint.size() <= prefix.size() || endpoint.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string name = endpoint.substr(prefix.size());
  return name.find('/') == std::string::npos && name != "." && name != "..";
}

}  // namespace stoker
