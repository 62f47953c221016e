// The frame every benchmark's main shares: its flags declared into its Options and parsed (--help ends it with 0,
// a bad flag with 2, as FlagSet::ParseOrExitCode says), then its measurement run, whose outcome gives the exit code
// and the figures that --json FILE asks for.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "base/flags.h"

namespace stoker::bench {

// What a benchmark's run ends with: its exit code, and its figures as one JSON object (none: nothing to write).
struct Outcome {
  int exit_code = 0;
  std::string json;
};

// Writes `object` (one JSON object) and a newline to `path`, the --json flag's value; nothing if either is empty.
void WriteJsonIfAsked(const std::string& path, const std::string& object);

// The options several benchmarks share, each flag meaning the same wherever it is taken. A benchmark's Options
// derive from these and give their defaults (Options() : CommonOptions{.batch = 64, .seconds = 8} {}); its
// AddFlags declares those it takes with AddCommonFlags, and --json, which every benchmark takes, Main declares. A
// benchmark whose flag for one of these fields has another name or meaning (simulated workers, a --batch) declares
// that flag itself.
struct CommonOptions {
  uint32_t batch = 0;           // --batch-size: samples per batch
  double seconds = 0;           // --seconds: how long each timed part runs (which parts, the benchmark says)
  uint32_t workers = 0;         // --workers: worker processes
  uint32_t worker_threads = 0;  // --worker-threads: pipeline threads per worker
  uint64_t images = 0;          // --images: images in the generated synthetic dataset
  std::string dir;              // --dir: working directory (what the run writes: dataset or manifest, journal, logs)
  std::string json;             // --json: where the figures go
};

// The common flags besides --seconds, which every benchmark takes.
enum class CommonFlag { kBatchSize, kWorkers, kWorkerThreads, kImages, kDir };

// Declares --seconds, its help saying what the benchmark times (e.g. "timed seconds per worker count"), and the
// common flags in `taken` (in CommonOptions' order), each into its field of `o`.
void AddCommonFlags(FlagSet& flags, CommonOptions& o, const std::string& seconds_help,
                    std::initializer_list<CommonFlag> taken);

// --json FILE: where every benchmark writes its figures.
void AddJsonFlag(FlagSet& flags, std::string* json);

// A benchmark's main: `usage` and `description` head its --help, `add_flags` declares its flags into a
// default-constructed Options (a CommonOptions), and --json FILE goes into its `json`; once they parse, runs
// run(options), writes the outcome's figures where --json says and returns its exit code.
template <typename Options, typename Run>
int Main(int argc, char** argv, const char* usage, const char* description,
         void (*add_flags)(FlagSet& flags, Options& o), Run run) {
  Options o;
  FlagSet flags(usage, description);
  add_flags(flags, o);
  AddJsonFlag(flags, &o.json);
  if (auto exit_code = flags.ParseOrExitCode(argc, argv)) return *exit_code;
  const Outcome outcome = run(o);
  WriteJsonIfAsked(o.json, outcome.json);
  return outcome.exit_code;
}

}  // namespace stoker::bench

// The main() of benchmark `name` (its --help says "<name> [flags]" and `description`), whose flags and run are
// stoker::AddFlags and stoker::RunBench, as Google Benchmark's BENCHMARK_MAIN() writes the main of its programs
// (and, as it does, ending in a declaration of main that the `;` after the macro closes).
#define STOKER_BENCH_MAIN(name, description)                                                                  \
  int main(int argc, char** argv) {                                                                           \
    return stoker::bench::Main(argc, argv, name " [flags]", description, stoker::AddFlags, stoker::RunBench); \
  }                                                                                                           \
  int main(int argc, char** argv)
