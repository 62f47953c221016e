#!/usr/bin/env bash
# Installs the dependencies (Debian packages) and builds stoker into build/ (or $STOKER_BUILD_DIR).
# Extra arguments go to CMake's configure step, e.g. scripts/build.sh -DSTOKER_WITH_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
BUILD_DIR=${STOKER_BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${STOKER_BUILD_TYPE:-RelWithDebInfo} "$@" > "$BUILD_DIR.configure.log" 2>&1 \
  || { cat "$BUILD_DIR.configure.log"; exit 1; }
grep -E "^-- stoker" "$BUILD_DIR.configure.log" || true
cmake --build "$BUILD_DIR" -j "$(nproc)"
