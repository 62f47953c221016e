// What the local-mode and node-local tests look at in this process: the stoker servers it started that still run,
// and environment variables set for a scope.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>

namespace stoker::testing {

// {pid: program} of this process's children that are stoker servers and still run (zombies left out).
inline std::map<int, std::string> ServerChildren() {
  std::map<int, std::string> found;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return found;
  while (dirent* entry = ::readdir(proc)) {
    const std::string pid = entry->d_name;
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat("/proc/" + pid + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(line.substr(close + 1));
    std::string state;
    int parent = 0;
    fields >> state >> parent;
    std::error_code error;
    const std::string program = std::filesystem::read_symlink("/proc/" + pid + "/exe", error).filename().string();
    if (parent == ::getpid() && state != "Z" && (program == "stoker-coordinator" || program == "stoker-worker")) {
      found[std::stoi(pid)] = program;
    }
  }
  ::closedir(proc);
  return found;
}

// Sets (or, with nullptr, unsets) an environment variable for a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace stoker::testing
