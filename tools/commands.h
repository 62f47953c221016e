// The subcommands of the `stoker` command line. Each parses its own flags (--help lists them) and returns the
// process exit code: 0 success, 1 failure, 2 bad usage.
#pragma once

#include "stoker/status.h"

namespace stoker::tools {

int IndexCommand(int argc, char** argv);       // stoker index PATH -o MANIFEST
int GenDatasetCommand(int argc, char** argv);  // stoker gen-dataset DIR
int ConsumeCommand(int argc, char** argv);     // stoker consume --coordinator ... --job ... --rank ...
int CheckCommand(int argc, char** argv);       // stoker check --manifest ... LOG...
int DemoCommand(int argc, char** argv);        // stoker demo
int SoakCommand(int argc, char** argv);        // stoker soak --minutes N
int KeygenCommand(int argc, char** argv);      // stoker keygen --role ROLE
int TopCommand(int argc, char** argv);         // stoker top --coordinator-metrics HOST:PORT

// Prints `status` as "stoker <command>: <message>" and returns the exit code for it.
int Fail(const char* command, const Status& status);

}  // namespace stoker::tools
