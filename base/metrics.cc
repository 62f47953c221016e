// Metrics (metrics.h): the process's MetricsHub and the Prometheus text it builds from collectors at scrape time.
#include "base/metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <prometheus/text_serializer.h>
#include <sstream>
#include <unordered_map>

#include "stoker/build_revision.h"
#include "base/sync.h"

namespace stoker {

FamilyBuilder::FamilyBuilder(std::string name, std::string help, prometheus::MetricType type) {
  family_.name = std::move(name);
  family_.help = std::move(help);
  family_.type = type;
}

namespace {
std::vector<prometheus::ClientMetric::Label> ToLabels(const MetricLabels& labels) {
  std::vector<prometheus::ClientMetric::Label> out;
  out.reserve(labels.size());
  for (const auto& [name, value] : labels) out.push_back({name, value});
  return out;
}
}  // namespace

FamilyBuilder& FamilyBuilder::Add(const MetricLabels& labels, double value) {
  prometheus::ClientMetric m;
  m.label = ToLabels(labels);
  if (family_.type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else if (family_.type == prometheus::MetricType::Gauge) {
    m.gauge.value = value;
  } else {
    m.untyped.value = value;
  }
  family_.metric.push_back(std::move(m));
  return *this;
}

FamilyBuilder& FamilyBuilder::Add(const MetricLabels& labels, const prometheus::Histogram& histogram) {
  prometheus::ClientMetric m = histogram.Collect();
  m.label = ToLabels(labels);
  family_.metric.push_back(std::move(m));
  return *this;
}

const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const prometheus::Histogram::BucketBoundaries b = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                            0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5,
                                                            5,      10};
  return b;
}

const prometheus::Histogram::BucketBoundaries& StepBuckets() {
  static const prometheus::Histogram::BucketBoundaries b = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                            0.5,   1,      2.5,   5,    10,    30,   60};
  return b;
}

const BuildInfo& GetBuildInfo() {
  static const BuildInfo info{STOKER_VERSION, STOKER_REVISION};
  return info;
}

MetricsHub::MetricsHub(std::string component) : component_(std::move(component)) {}

uint64_t MetricsHub::Add(Collector collector) {
  MutexLock lock(mu_);
  uint64_t id = next_id_++;
  collectors_[id] = std::move(collector);
  return id;
}

void MetricsHub::Remove(uint64_t id) {
  MutexLock lock(mu_);
  collectors_.erase(id);
}

MetricFamilies MetricsHub::Collect() const {
  MetricFamilies raw;
  {
    MutexLock lock(mu_);  // held while collecting: Remove() waits for a running collector
    for (const auto& [id, collect] : collectors_) collect(raw);
  }
  CollectProcessMetrics(raw);
  const BuildInfo& build = GetBuildInfo();
  raw.push_back(FamilyBuilder("stoker_build_info", "stoker's version and git revision; the value is always 1",
                              prometheus::MetricType::Gauge)
                    .Add({{"component", component_}, {"revision", build.revision}, {"version", build.version}}, 1)
                    .Build());
  MetricFamilies merged;
  std::unordered_map<std::string, size_t> index;
  for (prometheus::MetricFamily& f : raw) {
    auto [it, inserted] = index.emplace(f.name, merged.size());
    if (inserted) {
      merged.push_back(std::move(f));
    } else {
      auto& into = merged[it->second].metric;
      into.insert(into.end(), std::make_move_iterator(f.metric.begin()), std::make_move_iterator(f.metric.end()));
    }
  }
  std::erase_if(merged, [](const prometheus::MetricFamily& f) { return f.metric.empty(); });
  return merged;
}

std::string MetricsHub::Exposition() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, Collect());
  return out.str();
}

void CollectTransportErrors(const std::string& component, const std::map<std::string, uint64_t>& by_site,
                            const MetricLabels& labels, MetricFamilies& out) {
  FamilyBuilder family("stoker_" + component + "_transport_errors_total",
                       "ZeroMQ failures survived (a send to a vanished peer, a broken receive), by call site.",
                       prometheus::MetricType::Counter);
  for (const auto& [site, n] : by_site) {
    MetricLabels with = labels;
    with.emplace_back("site", site);
    family.Add(with, static_cast<double>(n));
  }
  out.push_back(family.Build());
}

void CollectProcessMetrics(MetricFamilies& out) {
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  // /proc/self/stat: the command name (field 2) may hold spaces; fields after its closing parenthesis are plain.
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  stat_file.close();  // before /proc/self/fd is counted below
  size_t close = stat.rfind(')');
  if (close != std::string::npos) {
    std::istringstream fields(stat.substr(close + 2));
    std::vector<std::string> f;
    for (std::string s; fields >> s;) f.push_back(s);
    // f[0] is field 3 (state): utime = field 14, stime 15, starttime 22, vsize 23, rss 24.
    if (f.size() > 21) {
      double cpu = (std::stod(f[11]) + std::stod(f[12])) / ticks;
      double start_ticks = std::stod(f[19]);
      double vsize = std::stod(f[20]);
      double rss = std::stod(f[21]) * page;
      out.push_back(FamilyBuilder("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                                  prometheus::MetricType::Counter)
                        .Add({}, cpu)
                        .Build());
      out.push_back(FamilyBuilder("process_resident_memory_bytes", "Resident memory size in bytes.",
                                  prometheus::MetricType::Gauge)
                        .Add({}, rss)
                        .Build());
      out.push_back(FamilyBuilder("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                                  prometheus::MetricType::Gauge)
                        .Add({}, vsize)
                        .Build());
      std::ifstream proc_stat("/proc/stat");
      for (std::string line; std::getline(proc_stat, line);) {
        if (line.rfind("btime ", 0) == 0) {
          double boot = std::stod(line.substr(6));
          out.push_back(FamilyBuilder("process_start_time_seconds",
                                      "Start time of the process since unix epoch in seconds.",
                                      prometheus::MetricType::Gauge)
                            .Add({}, boot + start_ticks / ticks)
                            .Build());
          break;
        }
      }
    }
  }
  double fds = 0;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(dir)) fds += e->d_name[0] != '.';
    ::closedir(dir);
    fds -= 1;  // the directory stream's own descriptor
  }
  out.push_back(FamilyBuilder("process_open_fds", "Number of open file descriptors.", prometheus::MetricType::Gauge)
                    .Add({}, fds)
                    .Build());
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    out.push_back(FamilyBuilder("process_max_fds", "Maximum number of open file descriptors.",
                                prometheus::MetricType::Gauge)
                      .Add({}, static_cast<double>(limit.rlim_cur))
                      .Build());
  }
}

}  // namespace stoker
