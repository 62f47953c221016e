// The LocalCluster (tools/local_cluster.h) as tests configure it: binaries from $STOKER_BIN_DIR (CTest sets it)
// or beside the test executable, logs and journal in the test's temporary directory; and the small job the loader
// tests open on it.
#pragma once

#include <chrono>
#include <cstdlib>
#include <string>

#include "stoker/loader.h"
#include "tests/support/temp_dir.h"
#include "tools/local_cluster.h"

namespace stoker::testing {

// How long a whole job of the loopback integration tests may take before the test gives up on it.
inline constexpr auto kRunTimeout = std::chrono::seconds(180);

inline std::string BinaryDirectory() {
  const char* dir = std::getenv("STOKER_BIN_DIR");
  return dir != nullptr ? dir : tools::ExecutableDirectory();
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
