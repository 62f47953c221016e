// FairShare on its own: the order jobs are served in as grants accumulate, between teams by weight and between a
// team's jobs equally; an idle job banks nothing; the flag's parser refuses what it cannot mean.
#include "coordinator/fair_share.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace stoker::coordinator {
namespace {

// Serves `grants` grants, always to the job first in the order, each of that job's own size (job -> {team, samples
// a grant}), and sums the samples each got.
std::map<std::string, uint64_t> ServeSized(FairShare& shares,
                                           const std::map<std::string, std::pair<std::string, uint64_t>>& jobs,
                                           int grants) {
  std::map<std::string, uint64_t> got;
  for (int i = 0; i < grants; ++i) {
    const std::string* best = nullptr;
    FairShare::Key best_key;
    for (const auto& [job, team_size] : jobs) {
      FairShare::Key key = shares.KeyOf(team_size.first, job);
      if (best == nullptr || key < best_key) {
        best = &job;
        best_key = key;
      }
    }
    shares.Charge(jobs.at(*best).first, *best, jobs.at(*best).second);
    got[*best] += jobs.at(*best).second;
  }
  return got;
}

// The same with grants of `samples` each among `waiting` (job -> team), counting the grants each got.
std::map<std::string, int> Serve(FairShare& shares, const std::map<std::string, std::string>& waiting, int grants,
                                 uint64_t samples = 8) {
  std::map<std::string, std::pair<std::string, uint64_t>> jobs;
  for (const auto& [job, team] : waiting) jobs[job] = {team, samples};
  std::map<std::string, int> got;
  for (const auto& [job, n] : ServeSized(shares, jobs, grants)) got[job] = static_cast<int>(n / samples);
  return got;
}

TEST(FairShare, TeamsShareByWeightAndATeamsJobsShareItsPart) {
  FairShare shares({{"a", {.weight = 3}}});
  // Team a (weight 3) runs one job, team b (weight 1) three: a gets 3/4, b's jobs 1/12 each.
  auto got = Serve(shares, {{"a1", "a"}, {"b1", "b"}, {"b2", "b"}, {"b3", "b"}}, 1200);
  EXPECT_NEAR(got["a1"], 900, 2);
  EXPECT_NEAR(got["b1"], 100, 2);
  EXPECT_NEAR(got["b2"], 100, 2);
  EXPECT_NEAR(got["b3"], 100, 2);
  EXPECT_EQ(shares.SamplesOf("a"), 8u * got["a1"]);
}

TEST(FairShare, ANewJobStartsLevelAndBanksNothing) {
  FairShare shares;
  Serve(shares, {{"busy", "a"}}, 1000);  // alone for a long time
  // "late" arrives: it alternates with "busy" from now on, rather than taking the next 1000 grants.
  auto got = Serve(shares, {{"busy", "a"}, {"late", "b"}}, 100);
  EXPECT_NEAR(got["late"], 50, 1);
  EXPECT_NEAR(got["busy"], 50, 1);
  // The same within a team: a job of team a that was idle does not jump ahead of its teammate.
  got = Serve(shares, {{"busy", "a"}, {"a-late", "a"}}, 100);
  EXPECT_NEAR(got["a-late"], 50, 1);
}

// A job that was served and then idled keeps at most kLagGrants of its own grants of what it missed: on its
// return it is ahead of a job that never stopped by two grants, not by the thousand it was away for.
TEST(FairShare, AJobBackFromIdleBanksAtMostTwoGrants) {
  for (const std::string team : {"b", "a"}) {  // another team, then the same team as the busy job
    FairShare shares;
    Serve(shares, {{"busy", "a"}, {"idler", team}}, 100);
    Serve(shares, {{"busy", "a"}}, 1000);
    auto got = Serve(shares, {{"busy", "a"}, {"idler", team}}, 40);
    EXPECT_GE(got["idler"], 20) << "team " << team;
    EXPECT_LE(got["idler"], 20 + FairShare::kLagGrants) << "team " << team;
  }
}

// Between equal starts the least recently served goes first, whatever the names. Regression: equal keys went to
// the first job in name order, and on workers that each see only some jobs that order decided every tie, so the
// scale simulation's jobs late in it got up to 36 % less than their share.
TEST(FairShare, EqualStartsGoToTheLeastRecentlyServed) {
  FairShare shares;
  for (const char* job : {"job-c", "job-b", "job-a"}) shares.Charge("t", job, 8);  // level again: each one grant
  EXPECT_TRUE(shares.KeyOf("t", "job-c") < shares.KeyOf("t", "job-a"));
  EXPECT_TRUE(shares.KeyOf("t", "job-c") < shares.KeyOf("t", "job-b"));
  EXPECT_TRUE(shares.KeyOf("t", "job-b") < shares.KeyOf("t", "job-a"));
  shares.Charge("t", "job-c", 8);
  EXPECT_TRUE(shares.KeyOf("t", "job-b") < shares.KeyOf("t", "job-c")) << "job-c is ahead now";
  // The same between teams.
  for (const char* team : {"z", "y"}) shares.Charge(team, std::string("job-") + team, 8);
  EXPECT_TRUE(shares.KeyOf("z", "job-z") < shares.KeyOf("y", "job-y"));
}

// Within the shares, the job whose GPUs stall most goes first: level jobs, the one served most recently but
// starving is served before one whose input is ahead, in a team and between teams.
TEST(FairShare, AmongLevelJobsTheOneStallingMostGoesFirst) {
  FairShare shares;
  for (const char* job : {"ahead", "starved"}) shares.Charge("t", job, 8);  // level; "starved" served last
  EXPECT_TRUE(shares.KeyOf("t", "ahead") < shares.KeyOf("t", "starved")) << "without stalls, the least recent";
  shares.SetStalls({{"starved", 0.01}, {"ahead", 0.0}});
  EXPECT_TRUE(shares.KeyOf("t", "starved") < shares.KeyOf("t", "ahead"));
  shares.SetStalls({{"starved", 0.0}, {"ahead", 0.5}});
  EXPECT_TRUE(shares.KeyOf("t", "ahead") < shares.KeyOf("t", "starved")) << "it stalls more now";
  // Between teams, a team's turn comes with its most stalled job's stall.
  shares.Charge("x", "job-x", 8);
  shares.Charge("y", "job-y", 8);
  shares.Charge("x", "x-stalled", 8);
  shares.Charge("y", "job-y", 8);  // level: each team two grants, team y served last
  EXPECT_TRUE(shares.KeyOf("x", "job-x") < shares.KeyOf("y", "job-y")) << "without stalls, the least recent";
  shares.SetStalls({{"job-y", 0.3}});
  EXPECT_TRUE(shares.KeyOf("y", "job-y") < shares.KeyOf("x", "job-x"));
  shares.SetStalls({{"job-y", 0.3}, {"x-stalled", 0.6}});
  EXPECT_TRUE(shares.KeyOf("x", "job-x") < shares.KeyOf("y", "job-y")) << "team x has a job stalling more";
  EXPECT_TRUE(shares.KeyOf("x", "x-stalled") < shares.KeyOf("x", "job-x")) << "and within it, that job first";
  shares.SetStalls({{"x-stalled", std::nan("")}, {"job-y", 0.3}});  // a report that says nothing counts for nothing
  EXPECT_TRUE(shares.KeyOf("y", "job-y") < shares.KeyOf("x", "job-x"));
}

// A job that always stalls goes first among level jobs but is at most one of its own grants ahead: the shares hold
// between a team's jobs and between teams by weight, whatever the grants' sizes. Regression: the virtual time moved
// to the served job's start without its lead, past the waiting jobs' starts, and the lag bound then cut what they
// were owed: a stalled job of 64-sample grants beside one of 8 got 80 % of the samples, a stalled team of weight 1
// beside one of weight 4 got 33 %.
TEST(FairShare, AJobThatAlwaysStallsIsAtMostOneGrantAheadOfItsShare) {
  {
    FairShare shares;
    const std::map<std::string, std::pair<std::string, uint64_t>> jobs = {{"big", {"t", 64}}, {"small", {"t", 8}}};
    std::map<std::string, uint64_t> got = ServeSized(shares, jobs, 2);  // each known
    shares.SetStalls({{"big", 1.0}});
    for (int round = 0; round < 40; ++round) {  // at any point, not only at the end
      for (auto [job, n] : ServeSized(shares, jobs, 100)) got[job] += n;
      EXPECT_LE(got["big"], got["small"] + 2 * 64) << round;
      EXPECT_LE(got["small"], got["big"] + 64) << round;
    }
  }
  {
    FairShare shares({{"x", {.weight = 4}}});
    const std::map<std::string, std::pair<std::string, uint64_t>> jobs = {
        {"x1", {"x", 8}}, {"x2", {"x", 8}}, {"y1", {"y", 8}}, {"y2", {"y", 32}}};
    std::map<std::string, uint64_t> got = ServeSized(shares, jobs, 4);
    shares.SetStalls({{"y1", 0.98}, {"y2", 0.5}});
    for (int round = 0; round < 5; ++round) {  // it does not drift
      for (auto [job, n] : ServeSized(shares, jobs, 4000)) got[job] += n;
      const double y = static_cast<double>(got["y1"] + got["y2"]), x = static_cast<double>(got["x1"] + got["x2"]);
      EXPECT_LE(y, x / 4 + 32 + 8) << "team y is at most one of its grants (32) ahead, and one of job y1's";
      EXPECT_GE(y, x / 4 - 32) << round;
    }
    EXPECT_NEAR(static_cast<double>(got["y1"]) / static_cast<double>(got["y2"]), 1.0, 0.02);
    EXPECT_NEAR(static_cast<double>(got["x1"]) / static_cast<double>(got["x2"]), 1.0, 0.02);
  }
}

// A job that arrives beside a stalled one, just after the stalled job's grant, starts level with the others. It
// fails when leads move the virtual time far back (tried: ten leads); it does not tell the rule from moving it back
// by one lead, which a review suspected of the same and which neither this shape nor a random search of 3,000
// sequences of waiting subsets showed (at most 3 grants before the level job's next, under either rule).
TEST(FairShare, ANewcomerBesideAStalledJobStartsLevel) {
  for (double weight : {1.0, 0.25}) {
    FairShare shares({{"s", {.weight = weight}}});
    // Team s: a stalled job of large grants and an active one of small; team t: one active job.
    std::map<std::string, std::pair<std::string, uint64_t>> jobs = {
        {"stalled", {"s", 64}}, {"active-s", {"s", 8}}, {"active-t", {"t", 8}}};
    ServeSized(shares, jobs, 3);
    shares.SetStalls({{"stalled", 1.0}});
    ServeSized(shares, jobs, 200);
    while (ServeSized(shares, jobs, 1).count("stalled") == 0) {
    }  // the newcomer arrives just after the stalled job's grant
    // A newcomer in team s (level with active-s) and one in a new team u (level with team t).
    for (const auto& [name, team, level_with] : {std::tuple{"new-in-s", "s", "active-s"},
                                                 std::tuple{"new-in-u", "u", "active-t"}}) {
      FairShare copy = shares;
      std::map<std::string, std::pair<std::string, uint64_t>> with = jobs;
      with[name] = {team, 8};
      int before = 0;
      for (int i = 0; i < 100; ++i) {
        auto got = ServeSized(copy, with, 1);
        if (got.count(level_with) != 0) break;
        before += static_cast<int>(got.count(name));
      }
      EXPECT_LE(before, 3) << name << " at weight " << weight << ": at most the two grants any job starts with, "
                           << "and one more to even the round, before " << level_with << "'s next";
    }
  }
}

// A job back from idle that stalls banks no more than one grant beyond the two any job back from idle starts with.
TEST(FairShare, AStalledJobBackFromIdleIsAtMostThreeGrantsAhead) {
  FairShare shares;
  Serve(shares, {{"busy", "t"}, {"back", "t"}}, 2);
  Serve(shares, {{"busy", "t"}}, 1000);  // "back" idles
  shares.SetStalls({{"back", 1.0}});
  auto got = Serve(shares, {{"busy", "t"}, {"back", "t"}}, 40);
  EXPECT_LE(got["back"], 20 + 3);
  EXPECT_GE(got["back"], 20 + 2);
}

TEST(FairShare, LargerGrantsCountForMore) {
  FairShare shares;
  std::map<std::string, int> got;
  for (int i = 0; i < 300; ++i) {  // "big" takes 32 samples a grant, "small" 8
    const bool big = shares.KeyOf("x", "big") < shares.KeyOf("y", "small");
    shares.Charge(big ? "x" : "y", big ? "big" : "small", big ? 32 : 8);
    ++got[big ? "big" : "small"];
  }
  EXPECT_NEAR(got["small"], 4 * got["big"], 5) << "the same samples each, in four times the grants";
}

TEST(FairShare, JobsShareTheWorkersTimeNotTheirSamples) {
  FairShare shares;
  EXPECT_EQ(shares.CostFactorOf("dear"), 1.0) << "a job not reported on counts as the reference";
  // Units of 64 samples: "dear" takes 4 ms of a pipeline thread a sample, "cheap" 1 ms.
  for (int i = 0; i < 40; ++i) {
    shares.ReportCost("dear", 64, 0.256);
    shares.ReportCost("cheap", 64, 0.064);
  }
  EXPECT_DOUBLE_EQ(shares.SampleSecondsOf("dear"), 0.004);
  EXPECT_NEAR(shares.CostFactorOf("dear") / shares.CostFactorOf("cheap"), 4.0, 1e-9);
  auto got = Serve(shares, {{"dear", "a"}, {"cheap", "b"}}, 1000);
  EXPECT_NEAR(got["cheap"], 4 * got["dear"], 5) << "the same thread time each: a quarter of the samples for dear";
}

TEST(FairShare, OneWorkersReportsCannotMoveAJobsCostAndAllOfThemOnlyWithinBounds) {
  FairShare shares;
  for (int i = 0; i < 40; ++i) {
    for (const char* job : {"victim", "other", "third"}) shares.ReportCost(job, 64, 0.064);
  }
  // One worker of three says every unit it made of the victim cost a thousand times more: the median holds.
  for (int i = 0; i < 30; ++i) {
    shares.ReportCost("victim", 64, i % 3 == 0 ? 64.0 : 0.064);
  }
  EXPECT_DOUBLE_EQ(shares.SampleSecondsOf("victim"), 0.001);
  EXPECT_EQ(shares.CostFactorOf("victim"), 1.0);
  // Every worker says so: the factor stops at the bound against the typical job, which the victim's own reports
  // do not move, and the victim still gets 1 / 17 of the grants beside one other job.
  for (int i = 0; i < 100; ++i) shares.ReportCost("victim", 64, 64.0);
  EXPECT_EQ(shares.CostFactorOf("victim"), FairShare::kMaxCostFactor);
  EXPECT_EQ(shares.CostFactorOf("other"), 1.0);
  EXPECT_DOUBLE_EQ(shares.SampleSecondsOf("victim"), 1.0) << "what the workers said";
  EXPECT_DOUBLE_EQ(shares.BoundedSampleSecondsOf("victim"), 0.016) << "what caps and advice count: 16 x 1 ms";
  EXPECT_EQ(shares.BoundedSampleSecondsOf("unreported"), 0.0);
  auto got = Serve(shares, {{"victim", "a"}, {"other", "b"}}, 1700);
  EXPECT_NEAR(got["victim"], 100, 2);
  // Nonsense is ignored, and forgetting a job forgets its cost.
  shares.ReportCost("victim", 0, 1.0);
  shares.ReportCost("victim", 64, std::nan(""));
  shares.ReportCost("victim", 64, -1);
  EXPECT_EQ(shares.SampleSecondsOf("victim"), 1.0);
  shares.Forget("victim");
  EXPECT_EQ(shares.SampleSecondsOf("victim"), 0.0);
  EXPECT_EQ(shares.CostFactorOf("victim"), 1.0);
}

TEST(FairShare, ForgottenJobsAndEmptyTeamsLeaveNothingBehind) {
  FairShare shares;
  shares.Charge("a", "j1", 8);
  shares.Charge("a", "j2", 8);
  shares.Charge("b", "j3", 8);
  EXPECT_EQ(shares.teams(), 2u);
  shares.Charge("b", "j1", 8);  // j1's clients now use team b's key: it moves
  EXPECT_EQ(shares.TeamOfJob("j1"), "b");
  shares.Forget("j2");
  EXPECT_EQ(shares.teams(), 1u) << "team a has no job left";
  shares.Forget("j1");
  shares.Forget("j3");
  shares.Forget("never-seen");
  EXPECT_EQ(shares.teams(), 0u);
  EXPECT_EQ(shares.TeamOfJob("j1"), "");
}

TEST(FairShare, TeamsAreTheNamesOfClientKeys) {
  EXPECT_EQ(FairShare::TeamOf("client:team-a"), "team-a");
  EXPECT_EQ(FairShare::TeamOf(""), "");
  FairShare shares({{"team-a", {.weight = 2.5}}});
  EXPECT_EQ(shares.WeightOf("team-a"), 2.5);
  EXPECT_EQ(shares.WeightOf("anyone"), 1.0);
}

TEST(FairShare, TeamPoliciesParseAndBadOnesAreNamed) {
  auto teams = ParseTeamPolicies("team-a=3,team-b=0.5,", "team-a=10,team-c=-2", "team-b=4");
  ASSERT_TRUE(teams.ok()) << teams.status().ToString();
  EXPECT_EQ(teams->at("team-a").weight, 3.0);
  EXPECT_EQ(teams->at("team-a").priority, 10);
  EXPECT_EQ(teams->at("team-b").weight, 0.5);
  EXPECT_EQ(teams->at("team-b").max_workers, 4u);
  EXPECT_EQ(teams->at("team-c").priority, -2);
  EXPECT_EQ(teams->at("team-c").weight, 1.0);
  EXPECT_TRUE(ParseTeamPolicies("", "", "")->empty());
  for (const char* bad : {"team-a", "=2", "team-a=0", "team-a=-1", "team-a=x", "team-a=nan", "team-a=inf",
                          "team-a=1e9", "team-a=0.0001", "team-a=1001", "team-a=1,team-a=2"}) {
    auto parsed = ParseTeamPolicies(bad, "", "");
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(parsed.status().message().find("--team-weights"), std::string::npos) << parsed.status().ToString();
  }
  EXPECT_NE(ParseTeamPolicies("team-a=1,team-a=2", "", "").status().message().find("twice"), std::string::npos);
  for (const char* bad : {"team-a=1.5", "team-a=1001", "team-a=x"}) {
    EXPECT_NE(ParseTeamPolicies("", bad, "").status().message().find("--team-priorities"), std::string::npos) << bad;
  }
  for (const char* bad : {"team-a=0", "team-a=2.5", "team-a=-1"}) {
    EXPECT_NE(ParseTeamPolicies("", "", bad).status().message().find("--team-max-workers"), std::string::npos) << bad;
    EXPECT_NE(ParseTeamPolicies("", "", "", bad).status().message().find("--team-min-workers"), std::string::npos)
        << bad;
  }
  auto guaranteed = ParseTeamPolicies("", "", "team-a=4", "team-a=2,team-d=1");
  ASSERT_TRUE(guaranteed.ok()) << guaranteed.status().ToString();
  EXPECT_EQ(guaranteed->at("team-a").min_workers, 2u);
  EXPECT_EQ(guaranteed->at("team-d").min_workers, 1u);
  EXPECT_EQ(guaranteed->at("team-d").max_workers, 0u);
  const auto over = ParseTeamPolicies("", "", "team-a=2", "team-a=3");
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(over.status().message().find("guaranteed 3 workers but capped at 2"), std::string::npos)
      << over.status().ToString();
}

TEST(FairShare, ATeamBelowItsGuaranteeSortsBeforeAnyPriority) {
  FairShare shares({{"prod", {.priority = 1000}}});
  FairShare::Key research = shares.KeyOf("research", "r1");
  const FairShare::Key prod = shares.KeyOf("prod", "p1");
  EXPECT_TRUE(prod < research);
  research.below_minimum = true;
  EXPECT_TRUE(research < prod);
  EXPECT_FALSE(prod < research);
}

TEST(FairShare, AHigherPriorityIsServedFirstAndFairQueueingRunsWithinEachPriority) {
  FairShare shares({{"prod", {.priority = 1}}, {"prod-2", {.priority = 1}}});
  std::map<std::string, int> got;
  for (int i = 0; i < 100; ++i) {
    std::pair<std::string, std::string> best;  // (team, job)
    for (const auto& [team, job] : std::vector<std::pair<std::string, std::string>>{
             {"research", "r1"}, {"prod", "p1"}, {"prod-2", "p2"}}) {
      if (best.first.empty() || shares.KeyOf(team, job) < shares.KeyOf(best.first, best.second)) best = {team, job};
    }
    shares.Charge(best.first, best.second, 8);
    ++got[best.second];
  }
  EXPECT_EQ(got["r1"], 0) << "research waits while a production team can use the place";
  EXPECT_EQ(got["p1"], 50);
  EXPECT_EQ(got["p2"], 50);
}

}  // namespace
}  // namespace stoker::coordinator
