// Subprocess (subprocess.h): starting, signalling and reaping child processes, their output in a file.
#include "base/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace stoker {

namespace {
// A pidfd becomes readable when the process exits: waiting on it needs no polling loop (Linux >= 5.3).
int OpenPidFd(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
}  // namespace

Subprocess::~Subprocess() {
  Kill();
  if (pidfd_ >= 0) ::close(pidfd_);
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(other.pid_), pidfd_(other.pidfd_), exit_code_(other.exit_code_) {
  other.pid_ = -1;
  other.pidfd_ = -1;
}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    Kill();
    if (pidfd_ >= 0) ::close(pidfd_);
    pid_ = other.pid_;
    pidfd_ = other.pidfd_;
    exit_code_ = other.exit_code_;
    other.pid_ = -1;
    other.pidfd_ = -1;
  }
  return *this;
}

StatusOr<Subprocess> Subprocess::Start(const std::vector<std::string>& argv, const std::string& log_path,
                                       const std::vector<std::string>& env, int pass_fd) {
  if (argv.empty()) return InvalidArgumentError("Subprocess::Start without a program");
  std::string program = argv[0];
  if (program.find('/') == std::string::npos) {  // a bare name: look it up on PATH
    const char* path = std::getenv("PATH");
    std::stringstream dirs(path ? path : "/usr/bin:/bin");
    for (std::string dir; std::getline(dirs, dir, ':');) {
      if (::access((dir + "/" + program).c_str(), X_OK) == 0) {
        program = dir + "/" + program;
        break;
      }
    }
  }
  if (::access(program.c_str(), X_OK) != 0) {
    return NotFoundError("cannot execute " + argv[0] + ": " + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (log_path == kStderr) {
    posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  } else if (!log_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  }
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  int moved = -1;  // dup2 onto itself would keep close-on-exec: a descriptor already numbered kPassedFd moves first
  if (pass_fd == kPassedFd) pass_fd = moved = ::fcntl(pass_fd, F_DUPFD_CLOEXEC, kPassedFd + 1);
  if (pass_fd >= 0) posix_spawn_file_actions_adddup2(&actions, pass_fd, kPassedFd);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) env_storage.emplace_back(*e);
  for (const auto& e : env) env_storage.push_back(e);
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  Subprocess p;
  int rc = ::posix_spawn(&p.pid_, program.c_str(), &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (moved >= 0) ::close(moved);
  if (rc != 0) {
    p.pid_ = -1;
    return UnavailableError("cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  p.pidfd_ = OpenPidFd(p.pid_);
  return p;
}

bool Subprocess::running() {
  if (pid_ <= 0 || exit_code_) return false;
  return !Wait(std::chrono::milliseconds(0)).has_value();
}

void Subprocess::Signal(int signal) {
  if (pid_ > 0 && !exit_code_) ::kill(pid_, signal);
}

std::optional<int> Subprocess::Wait(std::chrono::milliseconds timeout) {
  if (exit_code_) return exit_code_;
  if (pid_ <= 0) return std::nullopt;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (r < 0 && errno != EINTR) {
      exit_code_ = -1;
      return exit_code_;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    if (pidfd_ >= 0) {
      pollfd fd{pidfd_, POLLIN, 0};
      ::poll(&fd, 1, static_cast<int>(left.count()));  // wakes when the process exits
    } else {
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(5)));  // kernels without pidfd_open
    }
  }
}

void Subprocess::Kill() {
  if (pid_ <= 0 || exit_code_) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  exit_code_ = 128 + SIGKILL;
}

void Subprocess::Abandon() {
  if (pidfd_ >= 0) ::close(pidfd_);
  pidfd_ = -1;
  pid_ = -1;
}

std::string ExecutableDirectory() {
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return ".";
  path[n] = '\0';
  std::string full(path);
  return full.substr(0, full.rfind('/'));
}

StatusOr<std::string> WaitForFile(const std::string& path, std::chrono::milliseconds timeout, Subprocess* process) {
  return WaitForFileContent(path, [](const std::string& content) { return !content.empty(); }, timeout, process);
}

StatusOr<std::string> WaitForFileContent(const std::string& path, const std::function<bool(const std::string&)>& ready,
                                         std::chrono::milliseconds timeout, Subprocess* process) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  // Endpoint files appear by rename, logs grow by appends: watch the directory for either.
  int watch = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (watch >= 0 && ::inotify_add_watch(watch, dir.c_str(), IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_MODIFY) < 0) {
    ::close(watch);
    watch = -1;
  }
  auto read_file = [&]() -> std::optional<std::string> {
    std::ifstream in(path);
    if (!in) return std::nullopt;
    std::stringstream content;
    content << in.rdbuf();
    if (!ready(content.str())) return std::nullopt;
    return content.str();
  };
  StatusOr<std::string> result = DeadlineExceededError(path + " was not ready within " +
                                                       std::to_string(timeout.count()) + " ms");
  while (true) {
    if (auto content = read_file()) {
      result = *content;
      break;
    }
    if (process != nullptr && !process->running()) {
      auto code = process->Wait(std::chrono::milliseconds(0));
      result = UnavailableError("process " + std::to_string(process->pid()) + " exited with code " +
                                std::to_string(code.value_or(-1)) + " before " + path + " was ready");
      break;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd fds[2] = {{watch, POLLIN, 0}, {process ? process->pidfd() : -1, POLLIN, 0}};
    if (watch < 0 && fds[1].fd < 0) {
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(10)));  // no inotify nor pidfd here
    } else {
      ::poll(fds, 2, static_cast<int>(left.count()));  // a file event in the directory, or the process exiting
      char events[4096];
      while (watch >= 0 && ::read(watch, events, sizeof(events)) > 0) {
      }
    }
  }
  if (watch >= 0) ::close(watch);
  return result;
}

}  // namespace stoker
