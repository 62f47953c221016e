// stoker top: a live terminal view of one coordinator's pipelines (tools/top.h), read from its admin port's
// /metrics every --interval seconds, for someone on a shell (in Kubernetes: kubectl port-forward to the
// coordinator's admin port first). --once prints one table, after one interval, and exits.
#include <algorithm>
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
void OnSignal(int signal) { g_stop = signal; }

// What top reads from one coordinator: about 1.5 KB per pipeline. A larger answer is not a coordinator's.
constexpr size_t kMaxTopBody = 8 << 20;

StatusOr<std::vector<MetricSample>> Scrape(storage::HttpTransport& http, const std::string& url, Duration timeout) {
  storage::StorageRequest request;
  request.url = url;
  request.timeout = timeout;
  request.connect_timeout = std::min<Duration>(timeout, Millis(5000));
  request.max_body = kMaxTopBody;
  storage::StorageResponse response = http.Perform(request);
  if (response.failure != storage::TransportFailure::kNone) {
    return UnavailableError("could not read " + url + ": " + response.failure_detail);
  }
  if (response.overflow) {
    return UnavailableError(url + " answered more than " + std::to_string(kMaxTopBody) + " bytes: not a coordinator");
  }
  if (response.status != 200) return UnavailableError(url + " answered HTTP " + std::to_string(response.status));
  auto samples = ParseMetricsText(response.body);
  // A bad answer is the server's fault, not a usage error: exit 1, not 2.
  if (!samples.ok()) return UnavailableError(url + " answered what is not Prometheus text: " +
                                             std::string(samples.status().message()));
  return samples;
}

// Sleeps until `until` or a signal, whichever comes first.
void SleepUntil(std::chrono::steady_clock::time_point until) {
  while (g_stop == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(until - std::chrono::steady_clock::now(),
                                                                              std::chrono::milliseconds(100)));
  }
}

}  // namespace

int TopCommand(int argc, char** argv) {
  std::string address;
  double interval = 2;
  bool once = false;
  FlagSet flags("stoker top --coordinator-metrics HOST:PORT [flags]",
                "Shows a coordinator's pipelines live, from its admin port's /metrics: team, epoch (from 0) and its "
                "progress, ranks held of all, the samples per second leased to each, what a sample costs the "
                "workers and its share of their time, the demand its training loops report, their input stall, the "
                "stage its batches spent most time in (the workers' read, decode, augment or seal, its clients' "
                "receive or h2d), and what holds a "
                "waiting pipeline back (cap, workers, window or scheduling); above them, the pool's workers, busy "
                "ratio and the workers the coordinator recommends. Rates are over the interval between two "
                "readings. In Kubernetes: kubectl port-forward to the coordinator's admin port (the chart's "
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
  const std::string url = TopMetricsUrl(address);
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(interval));
  // A reading may take at most the interval (at least a second, at most ten): Ctrl-C is never waited out long.
  const Duration timeout = std::clamp<Duration>(std::chrono::duration_cast<Duration>(period), Millis(1000),
                                                Millis(10000));
  storage::CurlTransport http(storage::CurlOptions{.max_connections = 1});
  struct sigaction action {};
  action.sa_handler = OnSignal;
  action.sa_flags = SA_RESETHAND;  // a second Ctrl-C ends it at once, even inside a reading
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  auto before = Scrape(http, url, timeout);
  if (!before.ok()) return Fail("top", before.status());
  auto before_at = std::chrono::steady_clock::now();
  auto wake = before_at + period;
  const bool terminal = !once && isatty(fileno(stdout));
  while (g_stop == 0) {
    SleepUntil(wake);
    if (g_stop != 0) break;
    auto now = Scrape(http, url, timeout);
    const auto at = std::chrono::steady_clock::now();
    wake = at + period;
    if (!now.ok()) {
      if (once) return Fail("top", now.status());
      std::fprintf(stderr, "stoker top: %s (trying again)\n", now.status().ToString().c_str());
      continue;  // the rates then span from the last good reading, whatever failed in between
    }
    const double seconds = std::chrono::duration<double>(at - before_at).count();
    const std::string table = RenderTop(MakeTopView(*before, *now, seconds), address, seconds);
    std::printf("%s%s", terminal ? "\033[H\033[2J" : (once ? "" : "\n"), table.c_str());
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) return 1;  // the reader went away (stoker top | head)
    if (once) return 0;
    before = std::move(now);
    before_at = at;
  }
  return once ? 128 + g_stop : 0;  // --once cut short before its table: not a success
}

}  // namespace stoker::tools
