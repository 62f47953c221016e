// LocalManifest (local_manifest.h): indexing local mode's dataset once, and keeping the manifest.
#include "client/src/local_manifest.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>

#include "base/lifeline.h"
#include "base/logging.h"
#include "base/subprocess.h"

namespace stoker::client {
namespace {

namespace fs = std::filesystem;

bool IsRemote(const std::string& dataset) {
  for (const char* scheme : {"s3://", "http://", "https://"}) {
    if (dataset.rfind(scheme, 0) == 0) return true;
  }
  return false;
}

std::string HomeDirectory() {
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/') return home;
  const passwd* user = ::getpwuid(::getuid());
  return user != nullptr && user->pw_dir != nullptr ? user->pw_dir : "";
}

// The newest modification time of a local dataset: its own and, for a folder, those of the folders directly in it.
std::optional<fs::file_time_type> Changed(const std::string& dataset) {
  std::error_code error;
  fs::file_time_type newest = fs::last_write_time(dataset, error);
  if (error) return std::nullopt;
  if (!fs::is_directory(dataset, error)) return newest;
  fs::directory_iterator it(dataset, error), end;
  for (; !error && it != end; it.increment(error)) {
    std::error_code ignored;
    if (it->is_directory(ignored)) newest = std::max(newest, fs::last_write_time(it->path(), ignored));
  }
  return newest;
}

// Whether the manifest at `kept` stands for `dataset`: it is ours, and not older than a local dataset.
bool Fresh(const std::string& kept, const std::string& dataset) {
  std::error_code error;
  const fs::file_time_type made = fs::last_write_time(kept, error);
  if (error || !OnlyOursToWrite(kept)) return false;
  if (IsRemote(dataset)) return true;
  const std::optional<fs::file_time_type> changed = Changed(dataset);
  return changed && made >= *changed;
}

// Whether a manifest may be made in `dir`: it is this user's, writable, and no one else's to write but this user's
// own group (user-private groups, umask 002, leave a user's folders group-writable).
bool OursToKeepIn(const fs::path& dir) {
  struct stat st {};
  return ::stat(dir.c_str(), &st) == 0 && st.st_uid == ::getuid() && ::access(dir.c_str(), W_OK) == 0 &&
         (st.st_mode & S_IWOTH) == 0 && ((st.st_mode & S_IWGRP) == 0 || st.st_gid == ::getgid());
}

// Where the manifest of `dataset` is kept (local_manifest.h); empty if nowhere can be found.
std::string KeptPath(const std::string& dataset) {
  std::error_code error;
  fs::path absolute = IsRemote(dataset) ? fs::path(dataset) : fs::absolute(dataset, error).lexically_normal();
  if (error) return "";
  if (!IsRemote(dataset)) {
    if (!absolute.has_filename()) absolute = absolute.parent_path();  // "train/" -> "train"
    const fs::path beside = absolute.parent_path() / (absolute.filename().string() + ".stoker");
    if (OursToKeepIn(absolute.parent_path()) || Fresh(beside, dataset)) return beside.string();
  }
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const std::string root = cache != nullptr && cache[0] == '/' ? cache : HomeDirectory() + "/.cache";
  if (root == "/.cache") return "";
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.stoker",
                static_cast<unsigned long long>(std::hash<std::string>{}(absolute.string())));
  return root + "/stoker/" + name;
}

// Runs `stoker index dataset -o manifest`, its output on this process's stderr, ended with this process.
Status Index(const std::string& dataset, const std::string& manifest, const std::string& bin_dir) {
  STOKER_ASSIGN_OR_RETURN(Lifeline lifeline, Lifeline::Make());
  STOKER_LOG(kInfo) << "local mode: indexing " << dataset << " into " << manifest << " (once)";
  STOKER_ASSIGN_OR_RETURN(
      Subprocess index,
      Subprocess::Start({bin_dir + "/stoker", "index", dataset, "-o", manifest,
                         "--lifeline-fd=" + std::to_string(Subprocess::kPassedFd)},
                        Subprocess::kStderr, {}, lifeline.child_end()));
  // A day: the largest datasets on object storage take hours; the progress line shows it moving.
  const std::optional<int> code = index.Wait(std::chrono::hours(24));
  if (code == 0) return Status::Ok();
  return FailedPreconditionError("local mode: `stoker index " + dataset + "` " +
                                 (code ? "failed with exit code " + std::to_string(*code) + " (its output is above)"
                                       : std::string("did not finish within a day")));
}

}  // namespace

bool OnlyOursToWrite(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && (st.st_uid == ::getuid() || st.st_uid == 0) &&
         (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

StatusOr<std::string> LocalManifest(const std::string& dataset, const std::string& bin_dir) {
  std::error_code error;
  const bool local = fs::is_directory(dataset, error) ||
                     (dataset.size() > 4 && dataset.compare(dataset.size() - 4, 4, ".tar") == 0);
  if (!local && !IsRemote(dataset)) return dataset;  // a manifest (the coordinator checks it)
  const std::string kept = KeptPath(dataset);
  if (kept.empty()) return FailedPreconditionError("local mode: nowhere to keep the manifest of " + dataset +
                                                   " (set $XDG_CACHE_HOME or $HOME)");
  if (Fresh(kept, dataset)) return kept;
  fs::create_directories(fs::path(kept).parent_path(), error);
  // One indexer at a time per dataset: the lock goes with its holder, however it ends.
  const std::string lock_path = kept + ".lock";
  const int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lock < 0) return UnavailableError("local mode: cannot open " + lock_path + ": " + std::strerror(errno));
  Status indexed = Status::Ok();
  if (::flock(lock, LOCK_EX) != 0) {
    indexed = UnavailableError("local mode: cannot lock " + lock_path + ": " + std::strerror(errno));
  } else if (!Fresh(kept, dataset)) {  // another process may have made it while this one waited
    indexed = Index(dataset, kept, bin_dir);
  }
  ::close(lock);
  if (!indexed.ok()) return indexed;
  return kept;
}

}  // namespace stoker::client
