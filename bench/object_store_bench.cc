// Object storage vs local files: images/s one worker delivers to a client reading the same shards (a) from local
// tar files, (b) from a local S3-compatible server (s3rver, SigV4 signed), (c) from it through a proxy adding
// --rtt-ms of round trip, and the same two from nginx over plain HTTP (a server that costs little CPU, to tell the
// client's overhead from s3rver's), all in one run on one machine, interleaved over --rounds; medians reported.
//
//   object_store_bench [--images 1024] [--batch-size 32] [--threads 2] [--seconds 15] [--rtt-ms 20] [--rounds 3]
//                      [--json FILE]
//
// Goal (bench/RESULTS.md section 9): S3 / local >= 0.9, and with 20 ms of round trip >= 0.9 (read-ahead hides the latency). On a
// small machine the storage server shares the worker's cores; the nginx rows show how much of a gap is the server.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "bench/consume_rate.h"
#include "bench/bench_main.h"
#include "datagen/synthetic_dataset.h"
#include "storage/object_store.h"
#include "tools/dataset_index.h"
#include "tests/support/fault_proxy.h"
#include "tools/local_cluster.h"
#include "tests/support/object_servers.h"
#include "tools/remote_index.h"

namespace stoker {
namespace {

constexpr char kBucket[] = "bench";
constexpr char kKey[] = "bench-key";
constexpr char kSecret[] = "bench-secret-not-a-real-one";

struct Config {
  std::string name;
  std::string manifest;
  std::vector<std::string> worker_flags;
};

// CPU seconds a process has used (user + system), from /proc.
double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string skip;
  for (int i = 0; i < 11; ++i) fields >> skip;  // state .. cmajflt
  double utime = 0, stime = 0;
  fields >> utime >> stime;
  return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

struct Measured {
  bench::Rate rate;
  double worker_cores = 0;  // over the whole run (warm-up included)
  double server_cores = 0;
};

// Generates the shards once, uploads them to the S3 server and nginx, and indexes all three copies (with
// per-sample checksums everywhere, so every configuration verifies the same way).
std::map<std::string, std::string> Stage(const std::string& dir, uint64_t images, storage::ObjectStore& s3, testing::WebServer& web) {
  PosixEnv env;
  datagen::GenerateOptions gen;
  gen.images = images;
  gen.per_shard = 256;
  bench::DieUnlessOk(datagen::GenerateTarDataset(env, dir + "/shards", gen), "generating the dataset");
  std::map<std::string, std::string> manifests = {{"local", dir + "/local.stoker"}, {"s3", dir + "/s3.stoker"},
                                                  {"http", dir + "/http.stoker"}};
  bench::DieUnlessOk(tools::IndexDataset(env, dir + "/shards", manifests["local"], tools::IndexOptions{}).status(), "indexing");
  std::vector<std::string> s3_urls, http_urls;
  std::filesystem::create_directories(web.www() + "/d");
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/shards")) {
    const std::string name = entry.path().filename().string();
    auto data = ReadWholeFile(env, entry.path().string());
    bench::DieUnlessOk(data.status(), "reading a shard");
    bench::DieUnlessOk(s3.Put(std::string("s3://") + kBucket + "/" + name, *data), "uploading");
    std::filesystem::copy_file(entry.path(), web.www() + "/d/" + name,
                               std::filesystem::copy_options::overwrite_existing);
    s3_urls.push_back(std::string("s3://") + kBucket + "/" + name);
    http_urls.push_back(web.url() + "d/" + name);
  }
  bench::DieUnlessOk(tools::IndexRemoteDataset(s3, env, s3_urls, manifests["s3"], tools::IndexOptions{}).status(), "indexing s3");
  bench::DieUnlessOk(tools::IndexRemoteDataset(s3, env, http_urls, manifests["http"], tools::IndexOptions{}).status(),
                     "indexing http");
  return manifests;
}

StatusOr<Measured> Measure(const std::string& dir, const Config& c, uint32_t threads, uint32_t batch,
                           uint32_t credits, double seconds, pid_t server) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  tools::LocalCluster cluster({dir, "", true, {"--log-level", "warning"}});
  STOKER_RETURN_IF_ERROR(cluster.StartCoordinator());
  std::vector<std::string> flags = {"--log-level", "warning"};
  flags.insert(flags.end(), c.worker_flags.begin(), c.worker_flags.end());
  STOKER_RETURN_IF_ERROR(cluster.StartWorker(threads, flags).status());
  JobSpec spec;
  spec.name = "bench-" + c.name;
  for (char& ch : spec.name) {
    if (ch == ' ' || ch == '+') ch = '_';
  }
  spec.manifest_path = c.manifest;
  spec.batch_size = batch;
  spec.epochs = 1000;
  const pid_t worker = cluster.worker(0).pid();
  const double worker_before = CpuSeconds(worker), server_before = server > 0 ? CpuSeconds(server) : 0;
  const auto start = std::chrono::steady_clock::now();
  Measured m;
  STOKER_ASSIGN_OR_RETURN(m.rate, bench::ConsumeFor(cluster, spec, /*prefetch=*/8, credits, 3.0, seconds));
  const double wall = bench::SecondsSince(start);
  m.worker_cores = (CpuSeconds(worker) - worker_before) / wall;
  m.server_cores = server > 0 ? (CpuSeconds(server) - server_before) / wall : 0;
  return m;
}

// Its one worker's threads flag is --threads, not --worker-threads: it declares that itself.
struct Options : bench::CommonOptions {
  Options() : CommonOptions{.batch = 32, .seconds = 15, .worker_threads = 2, .images = 1024} {}
  uint32_t rtt_ms = 20, rounds = 3, credits = 2;
  std::string only;
};

// The servers and proxies every configuration reads through, started once.
struct Servers {
  std::unique_ptr<testing::S3Server> s3;
  std::unique_ptr<testing::WebServer> web;
  std::unique_ptr<testing::FaultProxy> s3_proxy, web_proxy;
};

// The configurations, each over its copy of the dataset: local files, s3rver and nginx, directly and with --rtt-ms
// added by a proxy. --only keeps the named ones (and always local, the baseline).
std::vector<Config> Configs(const Options& o, const std::string& dir, Servers& servers) {
  storage::StorageOptions options;
  options.s3_endpoint = servers.s3->endpoint();
  options.s3_addressing = storage::S3Addressing::kPath;
  options.credentials.access_key_id = kKey;
  options.credentials.secret_access_key = storage::Secret(kSecret);
  auto store = storage::MakeObjectStore(options, nullptr);
  std::map<std::string, std::string> m = Stage(dir, o.images, *store, *servers.web);
  auto s3_proxy = testing::FaultProxy::Start(servers.s3->port());
  auto web_proxy = testing::FaultProxy::Start(servers.web->port());
  bench::DieUnlessOk(s3_proxy.status(), "proxy");
  bench::DieUnlessOk(web_proxy.status(), "proxy");
  servers.s3_proxy = std::move(*s3_proxy);
  servers.web_proxy = std::move(*web_proxy);
  servers.s3_proxy->SetLatency(std::chrono::microseconds(o.rtt_ms * 500));
  servers.web_proxy->SetLatency(std::chrono::microseconds(o.rtt_ms * 500));
  // The http manifest names nginx's own port: a manifest root override sends the delayed runs through the proxy.
  const std::string rtt = " +" + std::to_string(o.rtt_ms) + "ms";
  std::vector<Config> configs = {
      {"local", m["local"], {}},
      {"s3", m["s3"], {"--s3-endpoint", servers.s3->endpoint()}},
      {"s3" + rtt, m["s3"], {"--s3-endpoint", servers.s3_proxy->url()}},
      {"http", m["http"], {}},
      {"http" + rtt, m["http"], {"--manifest-root", servers.web_proxy->url() + "/d/"}},
  };
  if (!o.only.empty()) {
    std::erase_if(configs, [&](const Config& c) { return ("," + o.only + ",").find("," + c.name + ",") == std::string::npos; });
    if (configs.empty() || configs.front().name != "local") configs.insert(configs.begin(), {"local", m["local"], {}});
  }
  return configs;
}

// Per configuration, what each round measured.
struct Rounds {
  std::map<std::string, std::vector<double>> rates, worker_cores, server_cores;
};

Rounds MeasureRounds(const Options& o, const std::string& dir, const std::vector<Config>& configs,
                     const Servers& servers) {
  Rounds r;
  for (uint32_t round = 0; round < o.rounds; ++round) {
    for (const Config& c : configs) {
      const pid_t server = c.name.starts_with("s3") ? servers.s3->pid() : c.name.starts_with("http") ? servers.web->pid() : 0;
      auto run = Measure(dir + "/run", c, o.worker_threads, o.batch, o.credits, o.seconds, server);
      bench::DieUnlessOk(run.status(), c.name.c_str());
      r.rates[c.name].push_back(run->rate.images_per_second);
      r.worker_cores[c.name].push_back(run->worker_cores);
      r.server_cores[c.name].push_back(run->server_cores);
      std::printf("round %u %-12s %7.1f img/s, worker %.2f cores, server %.2f cores\n", round + 1, c.name.c_str(),
                  run->rate.images_per_second, run->worker_cores, run->server_cores);
      std::fflush(stdout);
    }
  }
  return r;
}

// The medians against local files, printed, and as the JSON's rows.
std::string Report(const std::vector<Config>& configs, Rounds& r) {
  const double local = bench::Median(r.rates["local"]);
  std::printf("\n%-12s %10s %10s %14s %14s\n", "source", "img/s", "vs local", "worker cores", "server cores");
  std::ostringstream rows;
  for (const Config& c : configs) {
    const double median = bench::Median(r.rates[c.name]);
    const double wc = bench::Median(r.worker_cores[c.name]), sc = bench::Median(r.server_cores[c.name]);
    std::printf("%-12s %10.1f %9.2fx %14.2f %14.2f\n", c.name.c_str(), median, median / local, wc, sc);
    rows << (rows.tellp() > 0 ? ", " : "") << "{\"source\": \"" << c.name << "\", \"images_per_second\": " << median
         << ", \"ratio_to_local\": " << median / local << ", \"worker_cores\": " << wc
         << ", \"server_cores\": " << sc << ", \"rounds\": [";
    for (size_t i = 0; i < r.rates[c.name].size(); ++i) rows << (i ? ", " : "") << r.rates[c.name][i];
    rows << "]}";
  }
  return rows.str();
}

void AddFlags(FlagSet& flags, Options& o) {
  using enum bench::CommonFlag;
  bench::AddCommonFlags(flags, o, "timed seconds per configuration and round", {kBatchSize, kImages});
  flags.AddUint32("threads", &o.worker_threads, "the worker's pipeline threads");
  flags.AddUint32("rtt-ms", &o.rtt_ms, "round trip the proxy adds");
  flags.AddUint32("rounds", &o.rounds, "rounds of all configurations, interleaved");
  flags.AddUint32("credits", &o.credits, "batches the client lets the worker hold: the read-ahead depth in units");
  flags.AddString("only", &o.only, "measure only these sources (comma-separated names, e.g. local,http; profiling)");
}

bench::Outcome RunBench(const Options& o) {
  bench::ScratchDir scratch("object-store-bench");
  const std::string& dir = scratch.path();
  Servers servers;
  auto s3 = testing::S3Server::Start(dir + "/s3", kBucket, kKey, kSecret);
  bench::DieUnlessOk(s3.status(), "starting s3rver (scripts/install-test-servers.sh)");
  servers.s3 = std::move(*s3);
  auto web = testing::WebServer::Start(dir + "/web");
  bench::DieUnlessOk(web.status(), "starting nginx");
  servers.web = std::move(*web);
  ::setenv("AWS_ACCESS_KEY_ID", kKey, 1);  // the workers inherit them
  ::setenv("AWS_SECRET_ACCESS_KEY", kSecret, 1);
  const std::vector<Config> configs = Configs(o, dir, servers);
  Rounds rounds = MeasureRounds(o, dir, configs, servers);
  const std::string rows = Report(configs, rounds);
  std::ostringstream j;
  j << "{\"images\": " << o.images << ", \"batch_size\": " << o.batch << ", \"credits\": " << o.credits
    << ", \"worker_threads\": " << o.worker_threads << ", \"rtt_ms\": " << o.rtt_ms << ", \"seconds\": " << o.seconds
    << ", \"rounds\": " << o.rounds << ", \"results\": [" << rows << "]}";
  return {0, j.str()};
}

}  // namespace
}  // namespace stoker

STOKER_BENCH_MAIN("object_store_bench", "Worker img/s from local tar files vs object storage, same run.");
