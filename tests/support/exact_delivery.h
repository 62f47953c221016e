// ExpectExactDelivery: the end of every multi-process test — wait for the cluster's consumers, expect each to exit
// 0, and judge their delivery logs with the checker (every planned sample exactly once, equal steps per rank).
// Header-only, with gtest assertions: for test executables.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/support/checker.h"
#include "tests/support/fixtures.h"
#include "tools/local_cluster.h"

namespace stoker::testing {

inline void ExpectExactDelivery(tools::LocalCluster& cluster, const JobSpec& spec, const TestDataset& data,
                                size_t consumers, std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  auto codes = cluster.WaitForConsumers(timeout);
  ASSERT_TRUE(codes.ok()) << codes.status().ToString();
  std::vector<std::string> logs;
  for (size_t i = 0; i < consumers; ++i) {
    EXPECT_EQ((*codes)[i], 0) << cluster.ConsumerOutput(i);
    logs.push_back(cluster.ConsumerLog(i));
  }
  auto verdict = CheckLogs(spec, data.samples, logs);
  ASSERT_TRUE(verdict.ok()) << verdict.status().ToString();
  EXPECT_TRUE(verdict->ok()) << verdict->Describe();
}

}  // namespace stoker::testing
