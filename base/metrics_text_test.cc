// ParseMetricsText: what this project's own exposition writes reads back exactly, the format's escapes and special
// values, and every kind of malformed line is refused with its line number.
#include "base/metrics_text.h"

#include <gtest/gtest.h>

#include <cmath>

#include "base/metrics.h"

namespace stoker {
namespace {

using prometheus::MetricType;

TEST(MetricsText, ReadsBackWhatAHubExposes) {
  MetricsHub hub("coordinator");
  prometheus::Histogram wait(StepBuckets());
  wait.Observe(0.003);
  hub.Add([&](MetricFamilies& out) {
    out.push_back(FamilyBuilder("stoker_coordinator_demand_samples_per_second", "Demand.", MetricType::Gauge)
                      .Add({{"pipeline", "resnet"}}, 1234.5)
                      .Add({{"pipeline", "odd \"name\"\\x"}}, 2)
                      .Add({{"pipeline", "unknown"}}, NAN)
                      .Build());
    out.push_back(
        FamilyBuilder("stoker_client_wait_seconds", "Wait.", MetricType::Histogram).Add({{"rank", "0"}}, wait).Build());
  });
  auto samples = ParseMetricsText(hub.Exposition());
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  int demand = 0, buckets = 0;
  for (const MetricSample& s : *samples) {
    if (s.name == "stoker_coordinator_demand_samples_per_second") {
      ++demand;
      if (s.Label("pipeline") == "resnet") {
        EXPECT_EQ(s.value, 1234.5);
      } else if (s.Label("pipeline") == "unknown") {
        EXPECT_TRUE(std::isnan(s.value));
      } else {
        EXPECT_EQ(s.Label("pipeline"), "odd \"name\"\\x");
      }
    }
    if (s.name == "stoker_client_wait_seconds_bucket" && s.Label("le") == "+Inf") {
      ++buckets;
      EXPECT_EQ(s.value, 1);
    }
  }
  EXPECT_EQ(demand, 3);
  EXPECT_EQ(buckets, 1);
}

TEST(MetricsText, TakesTheFormatsSpecialValuesEscapesAndTimestamps) {
  auto samples = ParseMetricsText(
      "# HELP a_metric Some help.\n"
      "# TYPE a_metric gauge\n"
      "\n"
      "a_metric{x=\"line\\nbreak\", y = \"\"} +Inf 1700000000000\r\n"
      "b:metric -Inf\n"
      "  c_metric{} NaN\n"
      "d_metric 1.5e3\n"
      "e_metric Nan\n"
      "f_metric -infinity\n");
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  ASSERT_EQ(samples->size(), 6u);
  EXPECT_TRUE(std::isnan((*samples)[4].value)) << "prometheus-cpp's spelling";
  EXPECT_TRUE(std::isinf((*samples)[5].value) && (*samples)[5].value < 0);
  EXPECT_EQ((*samples)[0].Label("x"), "line\nbreak");
  EXPECT_EQ((*samples)[0].labels.size(), 2u);
  EXPECT_TRUE(std::isinf((*samples)[0].value) && (*samples)[0].value > 0);
  EXPECT_EQ((*samples)[1].name, "b:metric");
  EXPECT_TRUE(std::isinf((*samples)[1].value) && (*samples)[1].value < 0);
  EXPECT_TRUE(std::isnan((*samples)[2].value));
  EXPECT_EQ((*samples)[3].value, 1500);
}

TEST(MetricsText, RefusesEachMalformedLineByNumber) {
  for (const char* bad : {
           "1metric 1",                   // a name cannot start with a digit
           "metric",                      // no value
           "metric{x=\"1\" 1",            // labels not closed
           "metric{x=1} 1",               // an unquoted value
           "metric{x=\"\\t\"} 1",         // an escape the format lacks
           "metric{x=\"open} 1",          // a value not closed
           "metric{:x=\"1\"} 1",          // a label name with a colon
           "metric{x=\"1\"y=\"2\"} 1",    // labels not separated
           "metric one",                  // not a number
           "metric 0x10",                 // hex is not the format's
           "metric infinite",             // nor a word that starts like infinity
           "metric 1 12.5",               // a timestamp is an integer
           "metric 1 2 3",                // too many fields
           "metric{x=\"1\"}1",            // no space before the value
       }) {
    auto parsed = ParseMetricsText(std::string("ok_metric 1\n") + bad + "\n");
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(parsed.status().message().find("line 2"), std::string::npos) << parsed.status().ToString();
  }
}

TEST(MetricsText, CapsLabelsAndSize) {
  std::string many = "metric{";
  for (size_t i = 0; i <= kMaxSampleLabels; ++i) many += "l" + std::to_string(i) + "=\"v\",";
  many += "} 1\n";
  EXPECT_FALSE(ParseMetricsText(many).ok());
  EXPECT_FALSE(ParseMetricsText(std::string(kMaxMetricsTextBytes + 1, '#')).ok());
}

}  // namespace
}  // namespace stoker
