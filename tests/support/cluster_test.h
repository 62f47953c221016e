// ClusterTest: the fixture of the multi-process tests that start from a dataset of good JPEGs and a running
// coordinator. Start() makes both in the test's own directory (and the workers asked for), asserting each step, so
// ASSERT_NO_FATAL_FAILURE(Start(...)) ends the test where its set-up failed. Header-only, with gtest assertions.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_cluster.h"
#include "tools/local_cluster.h"

namespace stoker::testing {

class ClusterTest : public ::testing::Test {
 protected:
  // `images` JPEGs in shards of `per_shard` under dir_/jpegs, a cluster in dir_ whose coordinator runs with
  // `coordinator_flags`, and `workers` workers of the default size.
  void Start(uint64_t images, uint32_t per_shard, uint32_t workers = 0,
             std::vector<std::string> coordinator_flags = {}) {
    StartWith(ClusterIn(dir_, std::move(coordinator_flags)), images, per_shard, workers);
  }
  // The same, the cluster configured by `options`.
  void StartWith(tools::LocalClusterOptions options, uint64_t images, uint32_t per_shard, uint32_t workers = 0) {
    auto data = MakeJpegDataset(dir_.path(), "jpegs", images, per_shard);
    ASSERT_TRUE(data.ok()) << data.status().ToString();
    data_ = std::move(*data);
    cluster_ = std::make_unique<tools::LocalCluster>(std::move(options));
    ASSERT_TRUE(cluster_->StartCoordinator().ok());
    for (uint32_t i = 0; i < workers; ++i) ASSERT_TRUE(cluster_->StartWorker().ok());
  }

  TempDir dir_;
  TestDataset data_;
  std::unique_ptr<tools::LocalCluster> cluster_;
};

}  // namespace stoker::testing
