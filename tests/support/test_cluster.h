// The LocalCluster (tools/local_cluster.h) as tests configure it: binaries from $STOKER_BIN_DIR (CTest sets it)
// or beside the test executable, logs and journal in the test's temporary directory; and the small job the loader
// tests open on it.
#pragma once

#include <chrono>
#include <cstdlib>
#include <string>

#include "auth/keys.h"
#include "stoker/loader.h"
#include "tests/support/temp_dir.h"
#include "tools/keyring.h"
#include "tools/local_cluster.h"

namespace stoker::testing {

// How long a whole job of the loopback integration tests may take before the test gives up on it.
inline constexpr auto kRunTimeout = std::chrono::seconds(180);

// Another team's client key, trusted by the cluster in `dir` (made before its coordinator starts, which reads the
// trust file once): the keyring a LocalCluster in `dir` uses, made if need be, gets a client key named `name`. The
// key file's path, to pass a consumer as --key-file.
inline StatusOr<std::string> AddClientKey(const TempDir& dir, const std::string& name) {
  STOKER_ASSIGN_OR_RETURN(tools::Keyring ring, tools::MakeKeyring(dir.Join("keys")));
  STOKER_ASSIGN_OR_RETURN(KeyPair key, GenerateKeyPair(Role::kClient, name));
  const std::string path = dir.Join("keys/" + name + ".key");
  STOKER_RETURN_IF_ERROR(tools::WriteKeyFile(path, key));
  STOKER_RETURN_IF_ERROR(tools::AppendTrustLine(ring.trust, key));
  return path;
}

inline std::string BinaryDirectory() {
  const char* dir = std::getenv("STOKER_BIN_DIR");
  return dir != nullptr ? dir : ExecutableDirectory();
}

inline tools::LocalClusterOptions ClusterIn(const TempDir& dir, std::vector<std::string> coordinator_flags = {}) {
  tools::LocalClusterOptions o;
  o.dir = dir.path();
  o.bin_dir = BinaryDirectory();
  o.coordinator_flags = std::move(coordinator_flags);
  return o;
}

// A Loader of job `job` over `manifest` on the cluster's coordinator, with its client key: 32x32 images in batches
// of 8, prefetch 8, depth 3 (epochs, ranks and the rest as the test sets them).
inline LoaderOptions SmallLoaderJob(const tools::LocalCluster& cluster, const std::string& manifest,
                                    const std::string& job) {
  JobSpec spec;
  spec.name = job;
  spec.manifest_path = manifest;
  spec.batch_size = 8;
  spec.pipeline.output_height = 32;
  spec.pipeline.output_width = 32;
  LoaderOptions o;
  o.client.coordinator = cluster.coordinator_endpoint();
  cluster.Secure(o.client);
  o.client.job = job;
  o.client.spec = spec;
  o.client.prefetch = 8;
  o.depth = 3;
  return o;
}

}  // namespace stoker::testing
