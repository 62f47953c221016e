// LocalServers (local_servers.h): the coordinator and workers of stoker's local mode, started beside the trainer.
#include "client/src/local_servers.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/logging.h"
#include "client/src/local_manifest.h"

namespace stoker::client {
namespace {

namespace fs = std::filesystem;

constexpr auto kStopGrace = std::chrono::seconds(3);
constexpr char kPrefix[] = "stoker-local-";
constexpr size_t kMaxSocketPath = 100;  // sockaddr_un holds 108 bytes with the terminator; leave room

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
  const fs::path path = fs::canonical(info.dli_fname, error);
  return error ? "" : path.parent_path().string();
}

// Removes the private directories under `base` that this user's earlier local-mode processes left when they were
// killed. Each owner holds a lock on its directory's "owner" file for as long as it lives (the kernel lets go when
// it dies, in any PID namespace), so a directory whose lock can be taken is abandoned.
void SweepAbandoned(const std::string& base) {
  std::error_code error;
  fs::directory_iterator it(base, error), end;
  for (; !error && it != end; it.increment(error)) {
    const fs::path dir = it->path();
    struct stat st {};
    if (dir.filename().string().rfind(kPrefix, 0) != 0 || ::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != ::getuid()) {
      continue;
    }
    const int owner = ::open((dir / "owner").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (owner < 0) continue;  // being made, or not ours to judge
    const bool abandoned = ::flock(owner, LOCK_EX | LOCK_NB) == 0;
    ::close(owner);
    std::error_code ignored;
    if (abandoned) fs::remove_all(dir, ignored);
  }
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

}  // namespace

uint32_t LocalWorkersAuto() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cores = ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  // Under torchrun every process of the node starts its own servers: each takes its share of the cores.
  if (const char* local = std::getenv("LOCAL_WORLD_SIZE")) {
    const int processes = std::atoi(local);
    if (processes > 1) cores /= processes;
  }
  return cores > 3 ? static_cast<uint32_t>(cores - 2) : 1;
}

StatusOr<std::string> FindServerBinaries(const std::string& asked) {
  if (!asked.empty()) {
    if (HasServers(asked)) return asked;
    return NotFoundError("no executable stoker-coordinator, stoker-worker and stoker in " + asked);
  }
  std::vector<std::pair<std::string, bool>> looked;  // a directory, and whether it must be OnlyOursToWrite
  if (const char* env = std::getenv("STOKER_BIN_DIR")) looked.emplace_back(env, false);
  if (const std::string own = OwnDirectory(); !own.empty()) {
    looked.emplace_back(own + "/../bin", true);  // an install prefix, a build tree (the Python package's bin link)
    looked.emplace_back(own, true);
  }
  std::stringstream path(std::getenv("PATH") != nullptr ? std::getenv("PATH") : "");
  for (std::string dir; std::getline(path, dir, ':');) looked.emplace_back(dir, false);
  std::string names;
  for (const auto& [dir, must_trust] : looked) {
    std::error_code error;
    const fs::path resolved = fs::weakly_canonical(dir, error);
    if (!error && HasServers(resolved) && (!must_trust || OnlyOursToWrite(resolved))) return resolved.string();
    names += (names.empty() ? "" : ", ") + dir;
  }
  return NotFoundError("local mode needs stoker-coordinator, stoker-worker and stoker; looked in $STOKER_BIN_DIR, "
                       "beside the stoker library and on $PATH (" + names + "); set $STOKER_BIN_DIR or local_bin_dir");
}

StatusOr<std::unique_ptr<LocalServers>> LocalServers::Start(const LocalServerOptions& options) {
  STOKER_ASSIGN_OR_RETURN(std::string bin_dir, FindServerBinaries(options.bin_dir));
  auto servers = std::unique_ptr<LocalServers>(new LocalServers());
  servers->owner_pid_ = ::getpid();
  STOKER_RETURN_IF_ERROR(servers->MakeDirectory());
  STOKER_ASSIGN_OR_RETURN(servers->lifeline_, Lifeline::Make());
  const auto deadline = std::chrono::steady_clock::now() + options.start_timeout;
  if (options.coordinator.empty()) {
    STOKER_RETURN_IF_ERROR(servers->StartCoordinator(bin_dir, deadline));
  } else {
    servers->coordinator_endpoint_ = options.coordinator;  // (the workers make the group file, whoever is first)
  }
  const uint32_t workers = options.workers > 0 ? options.workers : LocalWorkersAuto();
  for (size_t i = 0; i < workers; ++i) STOKER_RETURN_IF_ERROR(servers->StartWorker(bin_dir, i, options));
  for (size_t i = 0; i < workers; ++i) {  // started together, waited for together
    STOKER_RETURN_IF_ERROR(servers->WaitUntilBound("worker-" + std::to_string(i), servers->workers_[i], deadline));
  }
  if (options.coordinator.empty()) {
    STOKER_LOG(kInfo) << "local mode: a coordinator and " << workers << (workers == 1 ? " worker" : " workers")
                      << " in " << servers->dir_;
  } else {
    STOKER_LOG(kInfo) << workers << " node-local " << (workers == 1 ? "worker" : "workers") << " in "
                      << servers->dir_ << ", beside the pool of " << options.coordinator;
  }
  return servers;
}

// A fresh directory only this user can open, under $XDG_RUNTIME_DIR (a per-user tmpfs) or the temporary directory,
// with an "owner" file this process holds locked while it lives.
Status LocalServers::MakeDirectory() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  struct stat st {};
  std::string base = runtime != nullptr && ::stat(runtime, &st) == 0 && st.st_uid == ::getuid() &&
                             ::access(runtime, W_OK) == 0
                         ? runtime
                         : "";
  if (base.empty()) {
    std::error_code error;
    base = fs::temp_directory_path(error).string();
    if (error) return UnavailableError("local mode: no temporary directory (is $TMPDIR a directory?)");
  }
  SweepAbandoned(base);
  std::string pattern = base + "/" + kPrefix + "XXXXXX";
  if (pattern.size() + std::strlen("/worker-00000.sock") > kMaxSocketPath) {
    return InvalidArgumentError("local mode: the sockets' directory " + base + " has too long a path for ipc:// "
                                "sockets; set $XDG_RUNTIME_DIR or $TMPDIR to a shorter one");
  }
  if (::mkdtemp(pattern.data()) == nullptr) {  // mode 0700
    return UnavailableError("local mode: cannot make a private directory under " + base + ": " + std::strerror(errno));
  }
  dir_ = pattern;
  // Locked before it takes its name: a sweeper that opens "owner" always finds it held (or its holder gone).
  const std::string unnamed = dir_ + "/owner.new";
  owner_ = ::open(unnamed.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (owner_ < 0 || ::flock(owner_, LOCK_EX | LOCK_NB) != 0 || ::rename(unnamed.c_str(), (dir_ + "/owner").c_str())) {
    return UnavailableError("local mode: cannot hold " + dir_ + "/owner: " + std::strerror(errno));
  }
  return Status::Ok();
}

Status LocalServers::StartCoordinator(const std::string& bin_dir, std::chrono::steady_clock::time_point deadline) {
  coordinator_endpoint_ = "ipc://" + dir_ + "/coordinator.sock";
  STOKER_ASSIGN_OR_RETURN(coordinator_, StartServer("coordinator", {bin_dir + "/stoker-coordinator",
                                                                    "--listen=" + coordinator_endpoint_, "--insecure",
                                                                    "--metrics-listen=", "--log-level=warning"}));
  return WaitUntilBound("coordinator", coordinator_, deadline);
}

Status LocalServers::StartWorker(const std::string& bin_dir, size_t index, const LocalServerOptions& options) {
  const std::string name = "worker-" + std::to_string(index);
  std::vector<std::string> argv = {bin_dir + "/stoker-worker", "--coordinator=" + coordinator_endpoint_,
                                   "--listen=ipc://" + dir_ + "/" + name + ".sock", "--threads=1",
                                   "--metrics-listen=", "--log-level=warning"};
  if (options.coordinator.empty()) {  // (a $STOKER_LOCAL_DIR this process has is not theirs)
    argv.insert(argv.end(), {"--worker-id=local-" + std::to_string(index), "--insecure", "--local-dir="});
  } else {  // among the pool's workers: an id of its own (random), local to this directory's group
    argv.push_back("--local-dir=" + dir_);
  }
  STOKER_ASSIGN_OR_RETURN(Subprocess worker, StartServer(name, std::move(argv), options.worker_env));
  workers_.push_back(std::move(worker));
  return Status::Ok();
}

StatusOr<Subprocess> LocalServers::StartServer(const std::string& name, std::vector<std::string> argv,
                                               const std::vector<std::string>& env) {
  argv.push_back("--endpoint-file=" + dir_ + "/" + name + ".endpoint");
  argv.push_back("--lifeline-fd=" + std::to_string(Subprocess::kPassedFd));
  return Subprocess::Start(argv, dir_ + "/" + name + ".log", env, lifeline_.child_end());
}

Status LocalServers::WaitUntilBound(const std::string& name, Subprocess& process,
                                    std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  auto bound = WaitForFile(dir_ + "/" + name + ".endpoint", std::max(left, std::chrono::milliseconds(0)), &process);
  if (bound.ok()) return Status::Ok();
  return UnavailableError("local mode: the " + name + " did not start (" + bound.status().message() +
                          "); its log ends:" + Tail(dir_ + "/" + name + ".log", 12));
}

std::vector<int> LocalServers::Stop() {
  if (::getpid() != owner_pid_) {  // a copy in a child forked without exec: the servers are its parent's
    for (Subprocess& w : workers_) w.Abandon();
    coordinator_.Abandon();
    if (owner_ >= 0) ::close(owner_);
    owner_ = -1;
    dir_.clear();
    lifeline_.Cut();  // this copy's write end only
    return {};
  }
  lifeline_.Cut();  // every server exits at once; one grace for all, then SIGKILL
  const auto deadline = std::chrono::steady_clock::now() + kStopGrace;
  std::vector<int> codes;
  auto reap = [&](Subprocess& p) {
    if (p.pid() <= 0) return;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    std::optional<int> code = p.Wait(std::max(left, std::chrono::milliseconds(0)));
    if (!code) {
      p.Kill();
      code = p.Wait(std::chrono::milliseconds(0));
    }
    codes.push_back(code.value_or(-1));
  };
  for (Subprocess& w : workers_) reap(w);
  reap(coordinator_);
  workers_.clear();
  coordinator_ = Subprocess();
  if (!dir_.empty()) {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
    dir_.clear();
  }
  if (owner_ >= 0) ::close(owner_);
  owner_ = -1;
  return codes;
}

LocalServers::~LocalServers() { Stop(); }

}  // namespace stoker::client
