// stoker top: a live terminal view of one coordinator's pipelines (tools/top.h), read from its admin port's
// /metrics every --interval seconds, for someone on a shell (in Kubernetes: kubectl port-forward to the
// coordinator's admin port first). --once prints one table, after one interval, and exits.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#include <unistd.h>

#include "base/flags.h"
#include "base/metrics_text.h"
#include "storage/curl_transport.h"
#include "tools/commands.h"
#include "tools/top.h"

namespace stoker::tools {
namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

StatusOr<std::vector<MetricSample>> Scrape(storage::HttpTransport& http, const std::string& url) {
  storage::StorageRequest request;
  request.url = url;
  request.timeout = Millis(10000);
  request.max_body = kMaxMetricsTextBytes;
  storage::StorageResponse response = http.Perform(request);
  if (response.failure != storage::TransportFailure::kNone) {
    return UnavailableError("could not read " + url + ": " + response.failure_detail);
  }
  if (response.overflow) return UnavailableError(url + " answered more than " + std::to_string(kMaxMetricsTextBytes) +
                                                 " bytes");
  if (response.status != 200) {
    return UnavailableError(url + " answered HTTP " + std::to_string(response.status));
  }
  auto samples = ParseMetricsText(response.body);
  if (!samples.ok()) return samples.status().WithContext(url);
  return samples;
}

}  // namespace

int TopCommand(int argc, char** argv) {
  std::string address;
  double interval = 2;
  bool once = false;
  FlagSet flags("stoker top --coordinator-metrics HOST:PORT [flags]",
                "Shows a coordinator's pipelines live, from its admin port's /metrics: team, epoch, ranks held, the "
                "samples per second leased to each and its share of all, the demand its training loops report, their "
                "input stall, and what holds a waiting pipeline back (cap, workers, window or scheduling); above "
                "them, the pool's workers, busy ratio and the workers the coordinator recommends. Rates are over the "
                "interval. In Kubernetes: kubectl port-forward to the coordinator's admin port (the chart's "
                "coordinator.ports.metrics, 9400) first.");
  flags.AddString("coordinator-metrics", &address,
                  "host:port of the coordinator's admin port (its --metrics-listen), e.g. 127.0.0.1:9400");
  flags.AddDouble("interval", &interval, "seconds between readings (0.5-3600)");
  flags.AddBool("once", &once, "print one table, an interval after the first reading, and exit");
  Status parsed = flags.Parse(argc, argv, 2);
  if (!parsed.ok()) return Fail("top", parsed);
  if (address.empty()) return Fail("top", InvalidArgumentError("--coordinator-metrics HOST:PORT is required"));
  if (!(interval >= 0.5 && interval <= 3600)) {
    return Fail("top", InvalidArgumentError("--interval is seconds from 0.5 to 3600"));
  }
  const std::string url =
      (address.rfind("http://", 0) == 0 || address.rfind("https://", 0) == 0 ? address : "http://" + address) +
      "/metrics";
  storage::CurlTransport http(storage::CurlOptions{.max_connections = 1});
  auto before = Scrape(http, url);
  if (!before.ok()) return Fail("top", before.status());
  auto last = std::chrono::steady_clock::now();
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  const bool terminal = !once && isatty(fileno(stdout));
  while (g_stop == 0) {
    const auto wake = last + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(interval));
    while (g_stop == 0 && std::chrono::steady_clock::now() < wake) {
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
          wake - std::chrono::steady_clock::now(), std::chrono::milliseconds(100)));
    }
    if (g_stop != 0) break;
    auto now = Scrape(http, url);
    const auto at = std::chrono::steady_clock::now();
    if (!now.ok()) {
      if (once) return Fail("top", now.status());
      std::fprintf(stderr, "stoker top: %s (trying again)\n", now.status().ToString().c_str());
      last = at;
      continue;
    }
    const double seconds = std::chrono::duration<double>(at - last).count();
    const std::string table = RenderTop(MakeTopView(*before, *now, seconds), address, seconds);
    std::printf("%s%s", terminal ? "\033[H\033[2J" : (once ? "" : "\n"), table.c_str());
    std::fflush(stdout);
    if (once) return 0;
    before = std::move(now);
    last = at;
  }
  return 0;
}

}  // namespace stoker::tools
