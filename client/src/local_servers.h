// LocalServers: stoker's local mode. A Client whose coordinator is "local" starts its own coordinator and worker
// processes on this machine and owns them: they end when the Client closes, and when its process dies however it
// dies (each holds a Lifeline to it, so a SIGKILLed trainer leaves nothing behind).
//
// Everything lives in a private directory (mode 0700, under $XDG_RUNTIME_DIR or the temporary directory): the
// processes' ipc:// sockets, their endpoint files and logs. CURVE is off and batches are not sealed: only this user
// can open the sockets, and the same user could read any key made for them, so keys would add cost and no
// protection (docs/design.md, "Local mode"). The directory is removed when the servers stop; one left by a process
// that was killed is removed by the next local-mode start of the same user.
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
  std::chrono::milliseconds start_timeout{30000};  // each process must have bound its socket by then
};

// Local workers when none are asked for: the cores this process may run on, less two for the trainer (its step
// loop and the client's I/O thread), at least one.
uint32_t LocalWorkersAuto();

// The directory holding stoker-coordinator, stoker-worker and stoker: `asked` if not empty, else $STOKER_BIN_DIR, else
// ../bin beside the library this code is in (a build tree, an install prefix), else the build tree's and the install
// prefix's bin directories as configured (the Python package used in place), else the first directory on $PATH with
// all three. NotFound naming every place looked at.
StatusOr<std::string> FindServerBinaries(const std::string& asked);

// Local mode's dataset: `dataset` itself if it names a manifest; if it names a dataset (a directory, a .tar shard,
// an s3://, http:// or https:// prefix), the manifest `stoker index` makes of it, made once and kept: beside a local
// dataset (<dataset>.stoker; for a directory's ".../train/", ".../train.stoker") where that can be written, else in
// $XDG_CACHE_HOME/stoker (~/.cache/stoker). A kept manifest older than a local dataset's own modification time is
// made again. `stoker index` shows its progress on this process's standard error.
StatusOr<std::string> LocalManifest(const std::string& dataset, const std::string& bin_dir);

class LocalServers {
 public:
  static StatusOr<std::unique_ptr<LocalServers>> Start(const LocalServerOptions& options);
  ~LocalServers();  // Stop()
  LocalServers(const LocalServers&) = delete;
  LocalServers& operator=(const LocalServers&) = delete;

  // The coordinator's control endpoint (ipc://<dir>/coordinator.sock).
  const std::string& coordinator_endpoint() const { return coordinator_endpoint_; }
  const std::string& dir() const { return dir_; }
  size_t worker_count() const { return workers_.size(); }
  pid_t coordinator_pid() const { return coordinator_.pid(); }
  pid_t worker_pid(size_t i) const { return workers_[i].pid(); }

  // Cuts the lifeline (every process exits at once), reaps them (SIGKILL after 5 s) and removes the directory.
  void Stop();

 private:
  LocalServers() = default;
  Status StartCoordinator(const std::string& bin_dir, std::chrono::milliseconds timeout);
  Status StartWorker(const std::string& bin_dir, size_t index, std::chrono::milliseconds timeout);
  // Starts `argv` logging to <dir>/<name>.log and waits for <dir>/<name>.endpoint; the error carries the log's tail.
  StatusOr<Subprocess> StartServer(const std::string& name, std::vector<std::string> argv,
                                   std::chrono::milliseconds timeout);

  std::string dir_;
  Lifeline lifeline_;
  Subprocess coordinator_;
  std::vector<Subprocess> workers_;
  std::string coordinator_endpoint_;
};

}  // namespace stoker::client
