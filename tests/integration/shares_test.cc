// Fair shares between jobs with real processes: a coordinator, five workers and three `stoker consume` clients
// whose training steps take 10, 20 and 40 ms, on a pool too small for all of them. What the pool gives each job is
// read from the coordinator's metrics while all three run, and held against the weighted max-min share computed
// from the demands the coordinator measured; every job is then checked exact. (The rules themselves, at every
// shape, are simulated on a fake clock in tests/scheduling/pool_test.cc.)
//
// The workers' time is a sleep (--inject-sample-delay), not decoding, so that a loaded two-core machine still
// gives each worker the same speed: what is measured is the coordinator's decisions, not the machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/checker.h"
#include "tests/support/cluster_test.h"
#include "tests/support/http_client.h"

namespace stoker::testing {
namespace {

class Shares : public ClusterTest {};

// Weighted max-min fair shares of `capacity` between equal weights: each job gets at most its demand, and what one
// cannot use goes equally to the others.
std::vector<double> WaterFill(double capacity, std::vector<double> demand) {
  std::vector<double> share(demand.size(), 0);
  std::vector<size_t> open(demand.size());
  for (size_t i = 0; i < demand.size(); ++i) open[i] = i;
  while (!open.empty()) {
    const double each = capacity / static_cast<double>(open.size());
    auto small = std::find_if(open.begin(), open.end(), [&](size_t i) { return demand[i] <= each; });
    if (small == open.end()) {
      for (size_t i : open) share[i] = each;
      break;
    }
    share[*small] = demand[*small];
    capacity -= demand[*small];
    open.erase(small);
  }
  return share;
}

TEST(WaterFillTest, WhatAJobCannotUseGoesToTheOthers) {
  EXPECT_EQ(WaterFill(90, {100, 50, 10}), (std::vector<double>{40, 40, 10}));
  EXPECT_EQ(WaterFill(90, {100, 100, 100}), (std::vector<double>{30, 30, 30}));
  EXPECT_EQ(WaterFill(90, {10, 20, 30}), (std::vector<double>{10, 20, 30}));
}

TEST_F(Shares, ThreeJobsOnAPoolTooSmallGetTheirMaxMinSharesEachExactlyOnce) {
  ASSERT_NO_FATAL_FAILURE(Start(96, 32));
  // Five single-thread workers of 4 x 10 ms a batch: about 100 batches/s in all (less what each batch costs
  // beside the sleep), against demands of about 100, 50 and 25 batches/s. The slow job is held by its own steps;
  // the other two split the rest.
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(cluster_->StartWorker(1, {"--inject-sample-delay", "10ms"}).ok());
  const std::array<const char*, 3> names = {"fast", "medium", "slow"};
  const std::array<const char*, 3> hold_ms = {"10", "20", "40"};
  std::vector<JobSpec> specs;
  for (size_t j = 0; j < names.size(); ++j) {
    JobSpec spec = SpecOver(names[j], data_, /*ranks=*/1, /*batch=*/4, /*epochs=*/24);  // 2,304 samples: the fast job's take 15 s
    spec.seed = 7;
    specs.push_back(spec);
    ASSERT_TRUE(cluster_->StartConsumer(names[j], spec, 0, {"--hold-ms", hold_ms[j]}).ok());
  }
  auto metric = [&](const std::string& family, const char* job) {
    return ScrapeMetric(cluster_->coordinator_metrics(), family + "{pipeline=\"" + job + "\",team=\"local\"}");
  };
  // The window starts once every job has been leased a few batches and the coordinator knows every demand.
  for (const char* job : names) {
    const std::string labels = std::string("{pipeline=\"") + job + "\"";
    ASSERT_TRUE(WaitForMetric(cluster_->coordinator_metrics(),
                              "stoker_coordinator_job_samples_leased_total" + labels + ",team=\"local\"}", 200,
                              Millis(60000))
                    .ok())
        << job;
    ASSERT_TRUE(WaitForMetric(cluster_->coordinator_metrics(), "stoker_coordinator_demand_samples_per_second" + labels + "}",
                              1, Millis(60000))
                    .ok())
        << job;
  }
  // Each job's samples leased over about 5 s, each timed from its own readings.
  using Clock = std::chrono::steady_clock;
  std::array<double, 3> before{};
  std::array<Clock::time_point, 3> began{};
  for (size_t j = 0; j < names.size(); ++j) {
    auto leased = metric("stoker_coordinator_job_samples_leased_total", names[j]);
    ASSERT_TRUE(leased.ok()) << leased.status().ToString();
    before[j] = *leased;
    began[j] = Clock::now();
  }
  std::this_thread::sleep_for(std::chrono::seconds(5));  // the measured interval itself, not a wait for an event
  std::vector<double> rate(3), demand(3);
  double total = 0;
  for (size_t j = 0; j < names.size(); ++j) {
    auto leased = metric("stoker_coordinator_job_samples_leased_total", names[j]);
    ASSERT_TRUE(leased.ok()) << leased.status().ToString();
    const double seconds = std::chrono::duration<double>(Clock::now() - began[j]).count();
    ASSERT_LT(*leased, 24.0 * 96) << names[j] << " was leased all its samples within the window: it did not compete "
                                  << "throughout (a slow start?)";
    rate[j] = (*leased - before[j]) / seconds;
    total += rate[j];
    auto wanted = ScrapeMetric(cluster_->coordinator_metrics(),
                               std::string("stoker_coordinator_demand_samples_per_second{pipeline=\"") + names[j] + "\"}");
    ASSERT_TRUE(wanted.ok()) << names[j] << ": " << wanted.status().ToString();
    demand[j] = *wanted;
  }
  const std::vector<double> fair = WaterFill(total, demand);
  for (size_t j = 0; j < names.size(); ++j) {
    std::printf("  %-6s demand %6.1f samples/s, fair %6.1f, got %6.1f\n", names[j], demand[j], fair[j], rate[j]);
  }
  ASSERT_GT(demand[0] + demand[1] + demand[2], 1.2 * total) << "the pool must be too small for them all";
  for (size_t j = 0; j < names.size(); ++j) EXPECT_NEAR(rate[j] / fair[j], 1.0, 0.10) << names[j];

  auto codes = cluster_->WaitForConsumers(kRunTimeout);
  ASSERT_TRUE(codes.ok()) << codes.status().ToString();
  for (size_t j = 0; j < names.size(); ++j) {
    EXPECT_EQ((*codes)[j], 0) << cluster_->ConsumerOutput(j);
    auto verdict = CheckLogs(specs[j], data_.samples, {cluster_->ConsumerLog(j)});
    ASSERT_TRUE(verdict.ok()) << verdict.status().ToString();
    EXPECT_TRUE(verdict->ok()) << names[j] << ": " << verdict->Describe();
  }
}

}  // namespace
}  // namespace stoker::testing
