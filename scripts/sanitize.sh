#!/usr/bin/env bash
# The tests under sanitizers, and the fuzzers, as CI runs them (scripts/test.sh calls this after the main suite):
#   asan  clang-14 with AddressSanitizer + UndefinedBehaviorSanitizer (and libFuzzer's coverage) in build-asan:
#         every unit and integration test, the real coordinator, workers and clients they start included
#   tsan  clang-14 with ThreadSanitizer in build-tsan: the multi-threaded components' tests (common, coordinator,
#         worker, client), and the processes they start
#   fuzz  every libFuzzer target of build-asan for $STOKER_FUZZ_SECONDS (20) seconds (scripts/fuzz.sh)
#   scripts/sanitize.sh [asan] [tsan] [fuzz]      (no argument: all three)
# A sanitizer report fails the test that caused it (the processes exit non-zero). Logs: build-*.log.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=("$@")
[ ${#STEPS[@]} -gt 0 ] || STEPS=(asan tsan fuzz)
JOBS=$(nproc)
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"  # a libzmq leak: see the file
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp"
# Tests that do not depend on how the code was built (lint, charts, dashboards, Python, images) run once, in the
# main suite; so do the installed package's (install), whose programs are built without the sanitizers' runtimes.
SKIP_LABELS="lint|deploy|observability|python|containers|install"

# Unity builds (CMake joins each target's sources eight to a translation unit): about a third less compile time
# than one unit per file. Names at file scope must then differ across a target's files, which a clash reports as a
# compile error here. Clang also checks the lock annotations as it compiles (cmake/StokerTargets.cmake).
configure() {  # configure DIR SANITIZERS [extra cmake args]
  local dir=$1 sanitize=$2
  shift 2
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1 \
    -DCMAKE_UNITY_BUILD=ON -DSTOKER_SANITIZE="$sanitize" -DSTOKER_WITH_CUDA=OFF -DSTOKER_BUILD_BENCH=OFF "$@" \
    > "$dir.configure.log" 2>&1 \
    || { cat "$dir.configure.log"; exit 1; }
}

build() {  # build DIR [targets]
  local dir=$1
  shift
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  local start=$SECONDS
  cmake --build "$dir" -j "$JOBS" "${targets[@]}" > "$dir.log" 2>&1 || { tail -60 "$dir.log"; exit 1; }
  echo "sanitize: built $dir in $((SECONDS - start)) s"
}

for step in "${STEPS[@]}"; do
  start=$SECONDS
  case "$step" in
    asan)
      configure build-asan address,undefined -DSTOKER_FUZZ=ON
      build build-asan
      ctest --test-dir build-asan --output-on-failure --timeout 1200 -j "$JOBS" -LE "$SKIP_LABELS"
      ;;
    tsan)
      configure build-tsan thread
      build build-tsan base_test dataset_test wire_test auth_test coordinator_test worker_test worker_pipeline_test \
        client_test stoker stoker-coordinator stoker-worker
      ctest --test-dir build-tsan --output-on-failure --timeout 1200 -j "$JOBS" \
        -R '^(base|dataset|wire|auth|coordinator|worker|worker_pipeline|client)_test\.'
      ;;
    fuzz)
      [ -x build-asan/bin/fuzz_tar ] || { configure build-asan address,undefined -DSTOKER_FUZZ=ON; build build-asan; }
      scripts/fuzz.sh --build-dir build-asan --seconds "${STOKER_FUZZ_SECONDS:-20}" --json build-asan/fuzz.json
      ;;
    *) echo "sanitize: unknown step $step (asan, tsan, fuzz)" >&2; exit 2 ;;
  esac
  echo "sanitize: $step done in $((SECONDS - start)) s"
done
