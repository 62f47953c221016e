#!/usr/bin/env bash
# Sets up (Debian packages, build) and runs the local demo: a generated ImageNet-like dataset, a coordinator,
# three worker processes and a consuming client per rank, with a live progress line and a summary per epoch.
# Flags go to `stoker demo` (see build/bin/stoker demo --help), e.g. scripts/demo.sh --summary-json summary.json
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh > build.log 2>&1 || { tail -n 50 build.log; echo "build failed: see build.log"; exit 1; }
exec "${STOKER_BUILD_DIR:-build}/bin/stoker" demo "$@"
