// The worker-count advice from heartbeat telemetry, under a fake clock.
#include "coordinator/capacity.h"

#include <gtest/gtest.h>

#include <functional>

namespace stoker::coordinator {
namespace {

class CapacityTest : public ::testing::Test {
 protected:
  // Feeds `seconds` of heartbeats (one per 250 ms) from workers making `rate` samples/s per busy thread-second
  // at `busy` occupancy, and from clients delivering `client_rate` samples/s whose steps are `stall` stalled.
  void Run(int seconds, int workers, double rate, double busy, int clients, double client_rate, double stall) {
    Heartbeats(seconds, [&] {
      for (int w = 0; w < workers; ++w) {
        estimator_.Worker("w" + std::to_string(w), 1, t_ * busy, static_cast<uint64_t>(t_ * busy * rate),
                          clock_.Now());
      }
      for (int c = 0; c < clients; ++c) {
        estimator_.Client("job", c, "c" + std::to_string(c), t_, t_ * stall,
                          static_cast<uint64_t>(t_ * client_rate), clock_.Now());
      }
    });
  }
  // `seconds` of heartbeats, one per 250 ms: `report` sends each tick's, t_ being the seconds so far.
  void Heartbeats(int seconds, const std::function<void()>& report) {
    for (int tick = 0; tick < seconds * 4; ++tick) {
      clock_.Advance(Millis(250));
      t_ += 0.25;
      report();
    }
  }
  FakeClock clock_;
  double t_ = 0;
  CapacityEstimator estimator_;
};

TEST_F(CapacityTest, NoAdviceUntilThereIsData) {
  auto advice = estimator_.Advise(3, clock_.Now());
  EXPECT_EQ(advice.recommended, 3u);
  EXPECT_LT(advice.demand, 0);
  Run(1, 3, 400, 1.0, 1, 300, 0.5);  // one second: too short a span to trust
  EXPECT_EQ(estimator_.Advise(3, clock_.Now()).recommended, 3u);
}

TEST_F(CapacityTest, DemandOverOneWorkersRate) {
  // Two workers at 400 samples/s per busy second, half busy; two ranks of one job delivering 300/s each, each
  // stalled half its steps: unstalled they would take 600 / 0.5 = 1,200/s: 3 workers at full speed, 4 with the
  // 10 % headroom (1,320 / 400 = 3.3).
  Run(10, 2, 400, 0.5, 2, 300, 0.5);
  auto advice = estimator_.Advise(2, clock_.Now());
  EXPECT_NEAR(advice.per_worker, 400, 5);
  EXPECT_NEAR(advice.worker_busy, 0.5, 0.02);
  EXPECT_NEAR(advice.demand, 1200, 15);
  EXPECT_NEAR(advice.jobs["job"].demand, 1200, 15);
  EXPECT_NEAR(advice.jobs["job"].stall, 0.5, 0.01);
  EXPECT_EQ(advice.recommended, 4u);
}

// Regression: four DDP ranks each stalled 10 % of their steps while half the pool idled got advice for fewer
// workers than ran (the demand it saw was what the stalled clients consumed).
TEST_F(CapacityTest, RanksWaitingWhileWorkersIdleNeverGetFewerWorkers) {
  Run(10, 8, 400, 0.5, 4, 100, 0.1);
  auto advice = estimator_.Advise(8, clock_.Now());
  EXPECT_NEAR(advice.jobs["job"].stall, 0.1, 0.005);
  EXPECT_NEAR(advice.demand, 400 / 0.9, 5);  // 2 workers' worth...
  EXPECT_EQ(advice.jobs["job"].bottleneck, "scheduling");
  EXPECT_EQ(advice.recommended, 8u);  // ...but ranks wait while workers idle: more would idle too, fewer starve
  EXPECT_EQ(estimator_.Advise(8, clock_.Now(), {"job"}).jobs["job"].bottleneck, "window");
}

TEST_F(CapacityTest, ABusyPoolIsTheWorkersBottleneck) {
  Run(10, 4, 400, 0.95, 2, 500, 0.2);
  auto advice = estimator_.Advise(4, clock_.Now());
  EXPECT_EQ(advice.jobs["job"].bottleneck, "workers");
  EXPECT_NEAR(advice.demand, 1000 / 0.8, 20);
  EXPECT_EQ(advice.recommended, 4u);  // 1,250 x 1.1 / 400, rounded up
}

// A team capped at N workers counts for at most N workers' worth of demand, and its stalled job names the cap: more
// workers would only idle beside it.
TEST_F(CapacityTest, ACappedTeamAsksForNoMoreThanItsCapAndNamesIt) {
  Run(10, 4, 400, 0.95, 2, 500, 0.2);  // the job would take 1,250/s: 4 workers with the headroom
  const CapacityEstimator::Caps caps{{{"research", 2}}, {{"job", "research"}}};
  auto advice = estimator_.Advise(4, clock_.Now(), {}, caps);
  EXPECT_NEAR(advice.jobs["job"].demand, 1250, 20) << "what its clients would take, as before";
  EXPECT_NEAR(advice.demand, 800, 15) << "but only its 2 workers' worth counts";
  EXPECT_EQ(advice.recommended, 3u);  // 800 x 1.1 / 400, rounded up
  EXPECT_EQ(advice.jobs["job"].bottleneck, "cap");
  // A cap it does not reach changes nothing.
  auto loose = estimator_.Advise(4, clock_.Now(), {}, {{{"research", 8}}, {{"job", "research"}}});
  EXPECT_NEAR(loose.demand, 1250, 20);
  EXPECT_EQ(loose.jobs["job"].bottleneck, "workers");
}

// A job's demand needs workers by what its own samples cost, not the pool's mean: the same 1,200 samples/s of a job
// whose samples cost a pipeline thread 5 ms (200 a second, half the pool's mean of 400) need twice the workers, and
// a cap of 4 workers holds it to 4 workers' time, 800 of its samples a second.
TEST_F(CapacityTest, ADearJobsDemandNeedsWorkersByItsOwnCost) {
  Run(10, 2, 400, 0.5, 2, 300, 0.5);
  CapacityEstimator::Caps caps;
  caps.sample_seconds["job"] = 0.005;
  auto advice = estimator_.Advise(2, clock_.Now(), {}, caps);
  EXPECT_NEAR(advice.demand, 1200, 15) << "its samples/s, as before";
  EXPECT_EQ(advice.recommended, 4u) << "1,320 x 0.005 = 6.6 workers, within a doubling of the 2 running";
  EXPECT_EQ(estimator_.Advise(4, clock_.Now(), {}, caps).recommended, 7u);
  caps.worker_threads = 2;  // workers of two threads each make twice as much
  EXPECT_EQ(estimator_.Advise(4, clock_.Now(), {}, caps).recommended, 4u);  // 3.3
  caps.worker_threads = 1;
  caps.max_workers["research"] = 4;
  caps.team_of["job"] = "research";
  advice = estimator_.Advise(4, clock_.Now(), {}, caps);
  EXPECT_NEAR(advice.demand, 800, 15) << "4 workers' time at 5 ms a sample";
  EXPECT_EQ(advice.recommended, 5u) << "4 x 1.1, rounded up";
  EXPECT_EQ(advice.jobs["job"].bottleneck, "cap");
}

TEST_F(CapacityTest, AJobThatDoesNotWaitHasNoBottleneck) {
  Run(10, 4, 400, 0.3, 4, 100, 0.005);
  auto advice = estimator_.Advise(4, clock_.Now());
  EXPECT_EQ(advice.jobs["job"].bottleneck, "");
  EXPECT_LT(advice.recommended, 4u);  // idle workers and no waiting: fewer will do
}

TEST_F(CapacityTest, NoStallMeansTheObservedRate) {
  Run(10, 4, 500, 0.3, 1, 600, 0.0);
  auto advice = estimator_.Advise(4, clock_.Now());
  EXPECT_NEAR(advice.demand, 600, 10);
  EXPECT_EQ(advice.recommended, 2u);  // 600 x 1.1 / 500, rounded up: fewer than the 4 running
}

TEST_F(CapacityTest, AConsumerThatOnlyWaitsAsksForAtMostADoubling) {
  Run(10, 1, 400, 1.0, 1, 400, 1.0);
  EXPECT_EQ(estimator_.Advise(1, clock_.Now()).recommended, 2u);
  EXPECT_EQ(estimator_.Advise(5, clock_.Now()).recommended, 10u);
}

TEST_F(CapacityTest, SilentReportersDropOut) {
  Run(10, 2, 400, 0.5, 2, 300, 0.5);
  clock_.Advance(Millis(31000));
  EXPECT_EQ(estimator_.Advise(2, clock_.Now()).recommended, 2u) << "stale figures are no advice";
  estimator_.Prune(clock_.Now());
  clock_.Advance(Millis(250));
  EXPECT_LT(estimator_.Advise(2, clock_.Now()).demand, 0);
}

// Node-local workers make part of a job's demand beside its client: the pool is sized for the rest, and their
// rate counts in neither the pool's per-worker rate nor its busy ratio.
TEST_F(CapacityTest, LocalWorkersSupplyIsDemandThePoolNeedNotMeet) {
  Heartbeats(10, [&] {
    // Two pool workers at 400/s per busy second, fully busy; two local workers of 4 threads at 100/s per thread,
    // fully busy (400/s each at full busy); one rank taking 1,800/s unstalled.
    for (int w = 0; w < 2; ++w) {
      estimator_.Worker("p" + std::to_string(w), 1, t_, static_cast<uint64_t>(t_ * 400), clock_.Now());
      estimator_.Worker("l" + std::to_string(w), 4, t_ * 4, static_cast<uint64_t>(t_ * 400), clock_.Now(), true,
                        "job");
    }
    estimator_.Client("job", 0, "c0", t_, 0, static_cast<uint64_t>(t_ * 1800), clock_.Now());
  });
  auto advice = estimator_.Advise(2, clock_.Now());
  EXPECT_NEAR(advice.per_worker, 400, 5);     // the pool's own
  EXPECT_NEAR(advice.worker_busy, 1.0, 0.02);
  EXPECT_NEAR(advice.local_supply, 800, 10);  // 2 x 100/s x 4 threads
  // (1,800 x 1.1 - 800) / 400 = 2.95: 3 pool workers, where 5 would be asked for without the local ones.
  EXPECT_EQ(advice.recommended, 3u);
}

TEST_F(CapacityTest, LocalWorkersCoveringTheirJobLeaveThePoolNothingForIt) {
  Heartbeats(10, [&] {
    estimator_.Worker("p0", 1, t_ * 0.5, static_cast<uint64_t>(t_ * 0.5 * 400), clock_.Now());
    // Local workers able to make 2,000/s serve "job", which takes 300/s: what they could make beyond 330/s is no
    // use to "other", which takes 200/s from the pool.
    estimator_.Worker("l0", 10, t_ * 1.5, static_cast<uint64_t>(t_ * 300), clock_.Now(), true, "job");
    estimator_.Client("job", 0, "c0", t_, 0, static_cast<uint64_t>(t_ * 300), clock_.Now());
    estimator_.Client("other", 0, "c1", t_, 0, static_cast<uint64_t>(t_ * 200), clock_.Now());
  });
  auto advice = estimator_.Advise(1, clock_.Now());
  EXPECT_NEAR(advice.local_supply, 2000, 20);
  EXPECT_EQ(advice.recommended, 1u);  // ceil((500 x 1.1 - 330) / 400) = 1: "other"'s demand
}

// A capped team's node-local supply takes off its own demand, not the others': its pool share stays within its
// cap, and another team's demand still counts whole (a capped team with local workers once took the pool's advice
// to zero).
TEST_F(CapacityTest, LocalSupplyOfACappedTeamLeavesTheOtherTeamsDemand) {
  Heartbeats(10, [&] {
    for (int w = 0; w < 4; ++w) {
      estimator_.Worker("p" + std::to_string(w), 1, t_, static_cast<uint64_t>(t_ * 400), clock_.Now());
    }
    estimator_.Worker("l0", 5, t_ * 5, static_cast<uint64_t>(t_ * 2500), clock_.Now(), true, "a-job");
    estimator_.Client("a-job", 0, "c0", t_, 0, static_cast<uint64_t>(t_ * 3000), clock_.Now());
    estimator_.Client("b-job", 0, "c1", t_, 0, static_cast<uint64_t>(t_ * 800), clock_.Now());
  });
  const CapacityEstimator::Caps caps{{{"a", 2}}, {{"a-job", "a"}, {"b-job", "b"}}};
  auto advice = estimator_.Advise(4, clock_.Now(), {}, caps);
  EXPECT_NEAR(advice.local_supply, 2500, 30);
  // a: min(3,000 x 1.1 - 2,500, 2 x 400 x 1.1) = 800; b: 880. (800 + 880) / 400 = 4.2: 5 pool workers.
  EXPECT_EQ(advice.recommended, 5u);
}

}  // namespace
}  // namespace stoker::coordinator
