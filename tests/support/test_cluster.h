// The LocalCluster (tools/local_cluster.h) as tests configure it: binaries from $STOKER_BIN_DIR (CTest sets it)
// or beside the test executable, logs and journal in the test's temporary directory.
#pragma once

#include <cstdlib>
#include <string>

#include "tests/support/temp_dir.h"
#include "tools/local_cluster.h"

namespace stoker::testing {

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

}  // namespace stoker::testing
