// LocalServers (local_servers.h): the coordinator and workers of stoker's local mode, started beside the trainer.
#include "client/src/local_servers.h"

#include <dlfcn.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>

#include "base/logging.h"

namespace stoker::client {
namespace {

constexpr auto kStopGrace = std::chrono::seconds(5);

bool HasServers(const std::string& dir) {
  if (dir.empty()) return false;
  for (const char* program : {"/stoker-coordinator", "/stoker-worker", "/stoker"}) {
    if (::access((dir + program).c_str(), X_OK) != 0) return false;
  }
  return true;
}

// The directory of the shared library (or executable) this function is part of.
std::string OwnDirectory() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<const void*>(&OwnDirectory), &info) == 0 || info.dli_fname == nullptr) return "";
  std::error_code error;
  const std::filesystem::path path = std::filesystem::canonical(info.dli_fname, error);
  return error ? "" : path.parent_path().string();
}

constexpr char kPrefix[] = "stoker-local-";

// Removes the private directories under `base` that this user's earlier local-mode processes left when they were
// killed: each names its owner's pid in an "owner" file, and a directory whose owner no longer runs is abandoned.
void SweepAbandoned(const std::string& base) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(base, error)) {
    if (entry.path().filename().string().rfind(kPrefix, 0) != 0) continue;
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid()) continue;
    std::ifstream owner(entry.path() / "owner");
    pid_t pid = 0;
    if (!(owner >> pid) || pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::filesystem::remove_all(entry.path(), error);
  }
}

// A fresh directory only this user can open, under $XDG_RUNTIME_DIR (a per-user tmpfs) or the temporary directory,
// with this process's pid in its "owner" file.
StatusOr<std::string> MakePrivateDirectory() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  std::string base = runtime != nullptr && ::access(runtime, W_OK) == 0 ? runtime : "";
  if (base.empty()) base = std::filesystem::temp_directory_path().string();
  SweepAbandoned(base);
  std::string pattern = base + "/" + kPrefix + "XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {  // mode 0700
    return UnavailableError("cannot make a private directory under " + base + ": " + std::strerror(errno));
  }
  std::ofstream(pattern + "/owner") << ::getpid() << "\n";
  return pattern;
}

// The last `lines` lines of a log, for an error message.
std::string Tail(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> kept;
  for (std::string line; std::getline(in, line);) {
    kept.push_back(line);
    if (kept.size() > lines) kept.erase(kept.begin());
  }
  std::string out;
  for (const std::string& line : kept) out += "\n  " + line;
  return out;
}

bool IsRemote(const std::string& dataset) {
  for (const char* scheme : {"s3://", "http://", "https://"}) {
    if (dataset.rfind(scheme, 0) == 0) return true;
  }
  return false;
}

// Where the manifest of `dataset` is kept: beside it if that directory is writable, else in the user's cache.
std::string ManifestCachePath(const std::string& dataset) {
  if (!IsRemote(dataset)) {
    std::filesystem::path path = std::filesystem::absolute(dataset).lexically_normal();
    if (!path.has_filename()) path = path.parent_path();  // "train/" -> "train"
    const std::filesystem::path beside = path.parent_path() / (path.filename().string() + ".stoker");
    if (::access(path.parent_path().c_str(), W_OK) == 0) return beside.string();
  }
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string root = cache != nullptr ? std::string(cache) : std::string(home != nullptr ? home : "/tmp") + "/.cache";
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.stoker",
                static_cast<unsigned long long>(std::hash<std::string>{}(std::filesystem::absolute(dataset))));
  return root + "/stoker/" + name;
}

// Whether the kept manifest at `cached` still stands for `dataset`: it exists and is not older than a local dataset.
bool Fresh(const std::string& cached, const std::string& dataset) {
  std::error_code error;
  const auto made = std::filesystem::last_write_time(cached, error);
  if (error) return false;
  if (IsRemote(dataset)) return true;
  const auto changed = std::filesystem::last_write_time(dataset, error);
  return !error && made >= changed;
}

}  // namespace

StatusOr<std::string> LocalManifest(const std::string& dataset, const std::string& bin_dir) {
  std::error_code error;
  const bool local_dataset = std::filesystem::is_directory(dataset, error) ||
                             (dataset.size() > 4 && dataset.compare(dataset.size() - 4, 4, ".tar") == 0);
  if (!local_dataset && !IsRemote(dataset)) return dataset;  // a manifest (the coordinator checks it)
  const std::string cached = ManifestCachePath(dataset);
  if (Fresh(cached, dataset)) return cached;
  std::filesystem::create_directories(std::filesystem::path(cached).parent_path(), error);
  const std::string partial = cached + ".partial-" + std::to_string(::getpid());
  STOKER_LOG(kInfo) << "local mode: indexing " << dataset << " into " << cached << " (once)";
  STOKER_ASSIGN_OR_RETURN(Subprocess index, Subprocess::Start({bin_dir + "/stoker", "index", dataset, "-o", partial},
                                                                Subprocess::kStderr));
  const std::optional<int> code = index.Wait(std::chrono::hours(24));
  if (code != 0) {
    std::filesystem::remove(partial, error);
    return FailedPreconditionError("local mode: `stoker index " + dataset + "` failed (exit code " +
                                   std::to_string(code.value_or(-1)) + "; its output is above)");
  }
  std::filesystem::rename(partial, cached, error);
  if (error) return UnavailableError("local mode: cannot keep the manifest at " + cached + ": " + error.message());
  return cached;
}

uint32_t LocalWorkersAuto() {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cores = ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  return cores > 3 ? static_cast<uint32_t>(cores - 2) : 1;
}

StatusOr<std::string> FindServerBinaries(const std::string& asked) {
  if (!asked.empty()) {
    if (HasServers(asked)) return asked;
    return NotFoundError("no executable stoker-coordinator, stoker-worker and stoker in " + asked);
  }
  std::vector<std::string> looked;
  if (const char* env = std::getenv("STOKER_BIN_DIR")) looked.push_back(env);
  if (const std::string own = OwnDirectory(); !own.empty()) {
    looked.push_back(own + "/../bin");
    looked.push_back(own);
  }
  looked.push_back(STOKER_BUILD_BIN_DIR);
  looked.push_back(STOKER_INSTALL_BIN_DIR);
  std::stringstream path(std::getenv("PATH") != nullptr ? std::getenv("PATH") : "");
  for (std::string dir; std::getline(path, dir, ':');) looked.push_back(dir);
  std::string names;
  for (const std::string& dir : looked) {
    if (HasServers(dir)) return std::filesystem::weakly_canonical(dir).string();
    names += (names.empty() ? "" : ", ") + dir;
  }
  return NotFoundError("local mode needs stoker-coordinator, stoker-worker and stoker; looked in $STOKER_BIN_DIR, beside "
                       "the stoker library and on $PATH (" + names + "); set $STOKER_BIN_DIR or local_bin_dir");
}

StatusOr<std::unique_ptr<LocalServers>> LocalServers::Start(const LocalServerOptions& options) {
  STOKER_ASSIGN_OR_RETURN(std::string bin_dir, FindServerBinaries(options.bin_dir));
  auto servers = std::unique_ptr<LocalServers>(new LocalServers());
  STOKER_ASSIGN_OR_RETURN(servers->dir_, MakePrivateDirectory());
  STOKER_ASSIGN_OR_RETURN(servers->lifeline_, Lifeline::Make());
  STOKER_RETURN_IF_ERROR(servers->StartCoordinator(bin_dir, options.start_timeout));
  const uint32_t workers = options.workers > 0 ? options.workers : LocalWorkersAuto();
  for (size_t i = 0; i < workers; ++i) STOKER_RETURN_IF_ERROR(servers->StartWorker(bin_dir, i, options.start_timeout));
  STOKER_LOG(kInfo) << "local mode: a coordinator and " << workers << (workers == 1 ? " worker" : " workers") << " in "
                    << servers->dir_;
  return servers;
}

Status LocalServers::StartCoordinator(const std::string& bin_dir, std::chrono::milliseconds timeout) {
  coordinator_endpoint_ = "ipc://" + dir_ + "/coordinator.sock";
  STOKER_ASSIGN_OR_RETURN(coordinator_,
                          StartServer("coordinator", {bin_dir + "/stoker-coordinator", "--listen=" + coordinator_endpoint_,
                                                      "--insecure", "--metrics-listen=", "--log-level=warning"},
                                      timeout));
  return Status::Ok();
}

Status LocalServers::StartWorker(const std::string& bin_dir, size_t index, std::chrono::milliseconds timeout) {
  const std::string name = "worker-" + std::to_string(index);
  STOKER_ASSIGN_OR_RETURN(Subprocess worker,
                          StartServer(name, {bin_dir + "/stoker-worker", "--coordinator=" + coordinator_endpoint_,
                                             "--listen=ipc://" + dir_ + "/" + name + ".sock", "--threads=1",
                                             "--worker-id=local-" + std::to_string(index), "--insecure",
                                             "--metrics-listen=", "--log-level=warning"},
                                      timeout));
  workers_.push_back(std::move(worker));
  return Status::Ok();
}

StatusOr<Subprocess> LocalServers::StartServer(const std::string& name, std::vector<std::string> argv,
                                               std::chrono::milliseconds timeout) {
  const std::string endpoint_file = dir_ + "/" + name + ".endpoint", log = dir_ + "/" + name + ".log";
  argv.push_back("--endpoint-file=" + endpoint_file);
  argv.push_back("--lifeline-fd=" + std::to_string(Subprocess::kPassedFd));
  STOKER_ASSIGN_OR_RETURN(Subprocess process, Subprocess::Start(argv, log, {}, lifeline_.child_end()));
  if (auto bound = WaitForFile(endpoint_file, timeout, &process); !bound.ok()) {
    return UnavailableError("local mode: the " + name + " did not start (" + bound.status().message() +
                            "); its log ends:" + Tail(log, 12));
  }
  return process;
}

void LocalServers::Stop() {
  lifeline_.Cut();
  for (Subprocess& w : workers_) {
    if (!w.Wait(kStopGrace)) w.Kill();
  }
  if (!coordinator_.Wait(kStopGrace)) coordinator_.Kill();
  workers_.clear();
  if (!dir_.empty()) {
    std::error_code error;
    std::filesystem::remove_all(dir_, error);
    dir_.clear();
  }
}

LocalServers::~LocalServers() { Stop(); }

}  // namespace stoker::client
