// stoker: the command line. `stoker demo` runs the whole data path locally; `stoker index` and
// `stoker gen-dataset` make datasets; `stoker consume` and `stoker check` are a client and a checker for tests
// and operators.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include "base/logging.h"
#include "stoker/status.h"
#include "tools/commands.h"

namespace stoker::tools {

int Fail(const char* command, const Status& status) {
  if (status.code() == StatusCode::kCancelled) return 0;  // --help
  std::fprintf(stderr, "stoker %s: %s\n", command, status.ToString().c_str());
  return status.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace stoker::tools

namespace {
const char kUsage[] =
    "usage: stoker COMMAND [flags]   (stoker COMMAND --help for its flags)\n"
    "\n"
    "  demo          run coordinator, workers and consumers on a generated dataset, with live progress\n"
    "  gen-dataset   write ImageNet-like JPEG tar shards (quality 96, 4:4:4, ~500x375)\n"
    "  index         index an ImageFolder tree or .tar shards into a manifest\n"
    "  consume       receive one rank's batches and log them (a client for tests and operators)\n"
    "  check         compare consumption logs with the plan: lost, duplicated, unexpected, corrupt\n"
    "  soak          run jobs for --minutes while injecting faults at random; check every epoch\n"
    "  keygen        make CURVE key pairs for the coordinator, workers and clients (and their trust lines)\n"
    "  top           a live view of a coordinator's pipelines: shares, demand, stall and what holds them back\n";
}  // namespace

int main(int argc, char** argv) {
  stoker::SetLogComponent("stoker");
  std::signal(SIGPIPE, SIG_IGN);  // a closed socket is an error to handle, not a reason to die
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string command = argv[1];
  if (command == "demo") return stoker::tools::DemoCommand(argc, argv);
  if (command == "gen-dataset") return stoker::tools::GenDatasetCommand(argc, argv);
  if (command == "index") return stoker::tools::IndexCommand(argc, argv);
  if (command == "consume") return stoker::tools::ConsumeCommand(argc, argv);
  if (command == "check") return stoker::tools::CheckCommand(argc, argv);
  if (command == "soak") return stoker::tools::SoakCommand(argc, argv);
  if (command == "keygen") return stoker::tools::KeygenCommand(argc, argv);
  if (command == "top") return stoker::tools::TopCommand(argc, argv);
  std::fprintf(stderr, "stoker: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}
