// The client's and the Loader's options as command-line flags, for the programs that make one from argv: `stoker
// consume` (tools/), the C ABI (stoker_loader_open and stoker_loader_validate take flags, so new options need no
// new symbols) and the tests. Not the public API: a training process in C++ fills ClientOptions and LoaderOptions.
//
// Thread safety: as the FlagSet they register on (one thread).
#pragma once

#include <cstdint>
#include <string>

#include "stoker/client_types.h"
#include "stoker/job_spec.h"
#include "stoker/loader_types.h"

namespace stoker {
class FlagSet;
}  // namespace stoker

namespace stoker::client {

// --key-file, --trust-file, --insecure and --allow-readable-key for a program that makes a Client (`stoker
// consume`, the Loader's flags), writing into `options`.
void AddClientSecurityFlags(FlagSet& flags, ClientOptions* options);

// --local-workers and --local-bin-dir: local mode's options (ClientOptions::local_workers), for the same programs.
void AddLocalModeFlags(FlagSet& flags, ClientOptions* options);

// The Loader's options as flags: the client's (--coordinator, --local-workers, --local-bin-dir, --rank, --prefetch, --credits, --client-id,
// --resume-token, --attach, --metrics-listen, --connect-timeout), the job spec's (--job, --manifest, --batch-size,
// ...; see AddJobSpecFlags) and the Loader's (--device, --depth, --dtype, --layout, --mean, --std,
// --tp-id/size/rank, --agree-id/size/rank, --collective-timeout). Registers them on construction; Finish() after
// parsing checks and returns the options.
class LoaderFlags {
 public:
  explicit LoaderFlags(FlagSet& flags);
  LoaderFlags(const LoaderFlags&) = delete;
  LoaderFlags& operator=(const LoaderFlags&) = delete;
  StatusOr<LoaderOptions> Finish() const;

 private:
  LoaderOptions options_;
  JobSpec spec_;
  bool attach_ = false;
  int64_t device_ = -1;
  std::string dtype_ = "float32", layout_ = "nchw", mean_, std_, connect_timeout_ = "30s", collective_timeout_ = "300s";
};

}  // namespace stoker::client
