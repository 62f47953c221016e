// stoker top's view (tools/top.h) from two readings of a coordinator's /metrics: rates and shares over the
// interval, a pipeline new since the first reading, a coordinator restarted between them, and a table that a
// hostile name cannot use to drive the terminal.
#include "tools/top.h"

#include <gtest/gtest.h>

namespace stoker::tools {
namespace {

std::vector<MetricSample> Read(const std::string& text) {
  auto samples = ParseMetricsText(text);
  EXPECT_TRUE(samples.ok()) << samples.status().ToString();
  return samples.ok() ? *samples : std::vector<MetricSample>{};
}

const char* kBefore =
    "stoker_coordinator_job_samples_leased_total{pipeline=\"a\",team=\"client:x\"} 1000\n"
    "stoker_coordinator_job_samples_leased_total{pipeline=\"b\",team=\"client:y\"} 500\n";

const char* kNow =
    "stoker_coordinator_workers{state=\"active\"} 4\n"
    "stoker_coordinator_workers{state=\"draining\"} 1\n"
    "stoker_coordinator_workers{state=\"local\"} 0\n"
    "stoker_coordinator_recommended_workers 6\n"
    "stoker_coordinator_worker_busy_ratio 0.93\n"
    "stoker_coordinator_epoch{pipeline=\"a\"} 2\n"
    "stoker_coordinator_epoch_progress_ratio{pipeline=\"a\"} 0.5\n"
    "stoker_coordinator_ranks{pipeline=\"a\",state=\"held\"} 4\n"
    "stoker_coordinator_ranks{pipeline=\"a\",state=\"free\"} 1\n"
    "stoker_coordinator_job_samples_leased_total{pipeline=\"a\",team=\"client:x\"} 4000\n"
    "stoker_coordinator_demand_samples_per_second{pipeline=\"a\"} 2000\n"
    "stoker_coordinator_input_stall_ratio{pipeline=\"a\"} 0.25\n"
    "stoker_coordinator_input_bottleneck{pipeline=\"a\",cause=\"cap\"} 0\n"
    "stoker_coordinator_input_bottleneck{pipeline=\"a\",cause=\"workers\"} 1\n"
    "stoker_coordinator_job_samples_leased_total{pipeline=\"b\",team=\"client:y\"} 1500\n"
    "stoker_coordinator_job_samples_leased_total{pipeline=\"c\",team=\"client:y\"} 1000\n";

TEST(Top, RatesAndSharesAreOverTheInterval) {
  TopView view = MakeTopView(Read(kBefore), Read(kNow), 2.0);
  ASSERT_EQ(view.rows.size(), 3u);
  const TopRow& a = view.rows[0];
  EXPECT_EQ(a.pipeline, "a");
  EXPECT_EQ(a.team, "client:x");
  EXPECT_DOUBLE_EQ(a.leased_per_second, 1500);  // (4000 - 1000) / 2
  EXPECT_DOUBLE_EQ(view.rows[1].leased_per_second, 500);
  EXPECT_DOUBLE_EQ(view.rows[2].leased_per_second, 500) << "new since the first reading: counted from zero";
  EXPECT_DOUBLE_EQ(view.leased_per_second, 2500);
  EXPECT_DOUBLE_EQ(a.share, 0.6);
  EXPECT_EQ(a.ranks, 5);
  EXPECT_EQ(a.ranks_held, 4);
  EXPECT_EQ(a.demand, 2000);
  EXPECT_EQ(a.stall, 0.25);
  EXPECT_EQ(a.bottleneck, "workers");
  EXPECT_LT(view.rows[1].demand, 0) << "not reported: shown as -";
  EXPECT_EQ(view.workers_active, 4);
  EXPECT_EQ(view.recommended_workers, 6);

  const std::string table = RenderTop(view, "127.0.0.1:9400", 2.0);
  EXPECT_NE(table.find("pool: 4 workers (+1 draining), busy 93%, recommended 6, 2500 samples/s leased"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("client:x"), std::string::npos) << table;
  EXPECT_NE(table.find("      4/5       1500          -     60%       2000     25%             -  workers\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("workers\n"), std::string::npos) << table;
}

// Once every pipeline that got samples says what they cost, SHARE is of the workers' time: b's samples cost four
// times a's, so its 500 samples/s are 4/7 of the time beside a's 1,500.
TEST(Top, SharesAreOfTheWorkersTimeOnceCostsAreKnown) {
  std::string now = kNow;
  now += "stoker_coordinator_job_sample_cost_seconds{pipeline=\"a\",team=\"client:x\"} 0.001\n"
         "stoker_coordinator_job_sample_cost_seconds{pipeline=\"b\",team=\"client:y\"} 0.004\n";
  TopView view = MakeTopView(Read(kBefore), Read(now), 2.0);
  ASSERT_EQ(view.rows.size(), 3u);
  EXPECT_DOUBLE_EQ(view.rows[0].share, 0.6) << "c got samples at a cost not known yet: shares of samples";
  now += "stoker_coordinator_job_sample_cost_seconds{pipeline=\"c\",team=\"client:y\"} 0.001\n";
  view = MakeTopView(Read(kBefore), Read(now), 2.0);
  ASSERT_EQ(view.rows.size(), 3u);
  EXPECT_DOUBLE_EQ(view.rows[0].share, 1.5 / 4.0);  // 1500 x 1 ms of (1.5 + 2 + 0.5) s a second
  EXPECT_DOUBLE_EQ(view.rows[1].share, 2.0 / 4.0);
  EXPECT_DOUBLE_EQ(view.rows[1].sample_seconds, 0.004);
  const std::string table = RenderTop(view, "127.0.0.1:9400", 2.0);
  EXPECT_NE(table.find("       1500       1.00     38%"), std::string::npos) << table;
}

// MOSTLY is the stage the pipeline's batches spent most time in over the interval, and its part: a's decode
// grew 3 s of 4 (its read was larger before the interval, not in it; its clients' receive, first heard in it, counts
// as a stage like the workers'); b reported no unit in the interval.
TEST(Top, MostlyIsTheStageThatTookMostOfTheIntervalsTime) {
  std::string before = kBefore;
  before += "stoker_coordinator_job_stage_seconds_total{pipeline=\"a\",team=\"client:x\",stage=\"read\"} 50\n"
            "stoker_coordinator_job_stage_seconds_total{pipeline=\"a\",team=\"client:x\",stage=\"decode\"} 10\n"
            "stoker_coordinator_job_stage_seconds_total{pipeline=\"b\",team=\"client:y\",stage=\"read\"} 7\n";
  std::string now = kNow;
  now += "stoker_coordinator_job_stage_seconds_total{pipeline=\"a\",team=\"client:x\",stage=\"read\"} 50.25\n"
         "stoker_coordinator_job_stage_seconds_total{pipeline=\"a\",team=\"client:x\",stage=\"decode\"} 13\n"
         "stoker_coordinator_job_stage_seconds_total{pipeline=\"a\",team=\"client:x\",stage=\"augment\"} 0.25\n"
         "stoker_coordinator_job_stage_seconds_total{pipeline=\"a\",team=\"client:x\",stage=\"seal\"} 0.25\n"
         "stoker_coordinator_job_stage_seconds_total{pipeline=\"a\",team=\"client:x\",stage=\"receive\"} 0.25\n"
         "stoker_coordinator_job_stage_seconds_total{pipeline=\"b\",team=\"client:y\",stage=\"read\"} 7\n";
  TopView view = MakeTopView(Read(before), Read(now), 2.0);
  ASSERT_EQ(view.rows.size(), 3u);
  EXPECT_EQ(view.rows[0].stage, "decode");
  EXPECT_DOUBLE_EQ(view.rows[0].stage_share, 0.75);
  EXPECT_LT(view.rows[1].stage_share, 0) << "nothing reported in the interval: -";
  const std::string table = RenderTop(view, "127.0.0.1:9400", 2.0);
  EXPECT_NE(table.find("     25%    decode 75%  workers\n"), std::string::npos) << table;
}

TEST(Top, TheAddressAUserTypesBecomesTheMetricsUrl) {
  EXPECT_EQ(TopMetricsUrl("127.0.0.1:9400"), "http://127.0.0.1:9400/metrics");
  EXPECT_EQ(TopMetricsUrl(":9400"), "http://127.0.0.1:9400/metrics");
  EXPECT_EQ(TopMetricsUrl("HTTP://coord:9400/metrics/"), "http://coord:9400/metrics");
  EXPECT_EQ(TopMetricsUrl("https://[::1]:9400/"), "https://[::1]:9400/metrics");
}

TEST(Top, ACounterThatWentBackCountsFromZero) {
  TopView view = MakeTopView(Read("stoker_coordinator_job_samples_leased_total{pipeline=\"a\",team=\"t\"} 9000\n"),
                             Read("stoker_coordinator_job_samples_leased_total{pipeline=\"a\",team=\"t\"} 100\n"), 1);
  ASSERT_EQ(view.rows.size(), 1u);
  EXPECT_DOUBLE_EQ(view.rows[0].leased_per_second, 100);
}

TEST(Top, NamesFromTheNetworkCannotDriveTheTerminal) {
  TopView view = MakeTopView(
      {}, Read("stoker_coordinator_input_bottleneck{pipeline=\"\x1b[2J\",cause=\"x\\nrm\"} 1\n"), 1);
  const std::string table = RenderTop(view, "h:1", 1);
  EXPECT_EQ(table.find('\x1b'), std::string::npos) << table;
  EXPECT_EQ(table.find("\nrm"), std::string::npos) << table;
  EXPECT_NE(RenderTop(TopView{}, "h:1", 1).find("no pipelines"), std::string::npos);
}

}  // namespace
}  // namespace stoker::tools
