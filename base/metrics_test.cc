// MetricsHub: families from several collectors merge by name, process and build metrics are always there, and a
// removed collector is gone.
#include "base/metrics.h"

#include <gtest/gtest.h>

namespace stoker {
namespace {

using prometheus::MetricType;

TEST(MetricsHub, MergesFamiliesOfTheSameNameAcrossCollectors) {
  MetricsHub hub("client");
  prometheus::Histogram wait(StepBuckets());
  wait.Observe(0.003);
  wait.Observe(0.2);
  auto a = hub.Add([&](MetricFamilies& out) {
    out.push_back(FamilyBuilder("stoker_client_batches_total", "Batches.", MetricType::Counter)
                      .Add({{"rank", "0"}}, 5)
                      .Build());
    out.push_back(FamilyBuilder("stoker_client_input_wait_seconds", "Wait.", MetricType::Histogram)
                      .Add({{"rank", "0"}}, wait)
                      .Build());
  });
  hub.Add([](MetricFamilies& out) {
    out.push_back(FamilyBuilder("stoker_client_batches_total", "Batches.", MetricType::Counter)
                      .Add({{"rank", "1"}}, 7)
                      .Build());
  });
  std::string text = hub.Exposition();
  size_t type_lines = 0;
  for (size_t p = text.find("# TYPE stoker_client_batches_total counter"); p != std::string::npos;
       p = text.find("# TYPE stoker_client_batches_total counter", p + 1)) {
    ++type_lines;
  }
  EXPECT_EQ(type_lines, 1u) << text;
  EXPECT_NE(text.find("stoker_client_batches_total{rank=\"0\"} 5"), std::string::npos) << text;
  EXPECT_NE(text.find("stoker_client_batches_total{rank=\"1\"} 7"), std::string::npos) << text;
  EXPECT_NE(text.find("stoker_client_input_wait_seconds_bucket{rank=\"0\",le=\"0.005\"} 1"), std::string::npos)
      << text;
  EXPECT_NE(text.find("stoker_client_input_wait_seconds_count{rank=\"0\"} 2"), std::string::npos) << text;
  hub.Remove(a);
  text = hub.Exposition();
  EXPECT_EQ(text.find("rank=\"0\""), std::string::npos) << text;
}

TEST(MetricsHub, ExportsBuildInfoAndProcessMetrics) {
  MetricsHub hub("worker");
  MetricFamilies families = hub.Collect();
  std::map<std::string, const prometheus::MetricFamily*> by_name;
  for (const auto& f : families) by_name[f.name] = &f;
  for (const char* name : {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
                           "process_max_fds", "process_start_time_seconds", "stoker_build_info"}) {
    ASSERT_TRUE(by_name.count(name)) << name;
  }
  EXPECT_GT(by_name["process_resident_memory_bytes"]->metric[0].gauge.value, 1e6);
  EXPECT_GT(by_name["process_open_fds"]->metric[0].gauge.value, 2);
  double start = by_name["process_start_time_seconds"]->metric[0].gauge.value;
  double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_LT(start, now + 2);
  EXPECT_GT(start, now - 3600) << "this test process started within the hour";
  const auto& info = by_name["stoker_build_info"]->metric[0];
  EXPECT_EQ(info.gauge.value, 1);
  std::map<std::string, std::string> labels;
  for (const auto& l : info.label) labels[l.name] = l.value;
  EXPECT_EQ(labels["component"], "worker");
  EXPECT_FALSE(labels["version"].empty());
  EXPECT_FALSE(labels["revision"].empty());
}

}  // namespace
}  // namespace stoker
