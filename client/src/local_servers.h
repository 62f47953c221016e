// LocalServers: stoker's local mode. A Client whose coordinator is "local" starts its own coordinator and worker
// processes on this machine and owns them (a Client with node-local workers beside a cluster's pool, its workers
// only: they register with that coordinator as local to the directory's group, base/local_group.h): they end when the Client closes, and when its process dies however it
// dies (each holds a Lifeline to it, so a SIGKILLed trainer leaves nothing behind).
//
// Everything lives in a private directory (mode 0700, under $XDG_RUNTIME_DIR or the temporary directory): the
// processes' ipc:// sockets, their endpoint files and logs. CURVE is off and batches are not sealed: only this user
// can open the sockets, and the same user could read any key made for them, so keys would add cost and no
// protection (docs/design.md, "Local mode"). The directory is removed when the servers stop; one left by a process
// that was killed is removed by the next local-mode start of the same user (each owner holds its directory's "owner"
// file locked while it lives).
//
// Thread safety: none; one owner (the Client).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/lifeline.h"
#include "base/subprocess.h"
#include "stoker/status.h"

namespace stoker::client {

struct LocalServerOptions {
  uint32_t workers = 0;                      // worker processes (one decode thread each); 0: LocalWorkersAuto()
  std::string bin_dir;                       // where stoker-coordinator and stoker-worker are (FindServerBinaries)
  std::chrono::milliseconds start_timeout{30000};  // every process must have bound its socket by then
  // Empty: local mode (a coordinator of its own). Else node-local workers only, registered with this coordinator as
  // local to the directory's group (stoker-worker --local-dir), with `worker_env` ("NAME=value": their keys' files,
  // through the environment rather than a command line others can read) added to their environment.
  std::string coordinator;
  std::vector<std::string> worker_env;
};

// Local workers when none are asked for: the cores this process may run on (divided by $LOCAL_WORLD_SIZE, torchrun's
// processes on this node, which start servers of their own), less two for the trainer (its step loop and the
// client's I/O thread), at least one.
uint32_t LocalWorkersAuto();

// The directory holding stoker-coordinator, stoker-worker and stoker: `asked` if not empty, else $STOKER_BIN_DIR, else
// ../bin beside the library this code is in (an install prefix; the build tree's Python package links its bin to the
// build's), else the library's own directory, those two only where this user or root owns them and no one else may
// write, else the first directory on $PATH with all three. NotFound naming every place looked at.
StatusOr<std::string> FindServerBinaries(const std::string& asked);

class LocalServers {
 public:
  static StatusOr<std::unique_ptr<LocalServers>> Start(const LocalServerOptions& options);
  ~LocalServers();  // Stop()
  LocalServers(const LocalServers&) = delete;
  LocalServers& operator=(const LocalServers&) = delete;

  // The coordinator's control endpoint (ipc://<dir>/coordinator.sock); the cluster's with node-local workers.
  const std::string& coordinator_endpoint() const { return coordinator_endpoint_; }
  const std::string& dir() const { return dir_; }
  size_t worker_count() const { return workers_.size(); }
  pid_t coordinator_pid() const { return coordinator_.pid(); }
  pid_t worker_pid(size_t i) const { return workers_[i].pid(); }

  // Cuts the lifeline (every process exits at once), reaps them (SIGKILL for any still running after 3 s) and removes
  // the directory. Returns the processes' exit codes (0: exited on the lifeline; 137: killed), workers first.
  std::vector<int> Stop();

 private:
  LocalServers() = default;
  Status MakeDirectory();
  Status StartCoordinator(const std::string& bin_dir, std::chrono::steady_clock::time_point deadline);
  Status StartWorker(const std::string& bin_dir, size_t index, const LocalServerOptions& options);
  // Starts `argv` (with `env` added) logging to <dir>/<name>.log, publishing <dir>/<name>.endpoint, holding the
  // lifeline.
  StatusOr<Subprocess> StartServer(const std::string& name, std::vector<std::string> argv,
                                   const std::vector<std::string>& env = {});
  // Waits for <dir>/<name>.endpoint; the error carries the log's tail.
  Status WaitUntilBound(const std::string& name, Subprocess& process, std::chrono::steady_clock::time_point deadline);

  std::string dir_;
  int owner_ = -1;  // <dir>/owner, locked while this object lives (SweepAbandoned)
  pid_t owner_pid_ = -1;  // the process that started the servers; a forked copy of this object only lets go
  Lifeline lifeline_;
  Subprocess coordinator_;
  std::vector<Subprocess> workers_;
  std::string coordinator_endpoint_;
};

}  // namespace stoker::client
