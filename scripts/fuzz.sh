#!/usr/bin/env bash
# Runs every libFuzzer target (tests/fuzz) for a fixed budget each, starting from the committed seed corpora, and
# fails on any crash, sanitizer report, leak, timeout (an input taking > 10 s) or out-of-memory (> 2 GiB). Needs a
# build made with -DSTOKER_FUZZ=ON (scripts/sanitize.sh makes build-asan with it).
#   scripts/fuzz.sh [--seconds 20] [--build-dir build-asan] [--json FILE] [target ...]
# Findings are kept as $BUILD/fuzz/artifacts/<target>/crash-* (add each as a regression test, then to the
# corpus); the corpus grown by a run stays in $BUILD/fuzz/corpus/<target>.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=20 BUILD=build-asan JSON="" TARGETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_PER_TARGET=$2; shift 2 ;;
    --build-dir) BUILD=$2; shift 2 ;;
    --json) JSON=$2; shift 2 ;;
    -h|--help) sed -n 2,8p "$0"; exit 0 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(control_frame data_frame journal tar jpeg http_request checkpoint manifest \
                                     object_listing)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
# OpenCV's pixel limit for non-JPEG images, read when its library loads: what stoker-worker sets for itself
# (worker/main.cc), at the jpeg target's 4 MP.
export OPENCV_IO_MAX_IMAGE_PIXELS=${OPENCV_IO_MAX_IMAGE_PIXELS:-4194304}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
failed=0
results=()
for t in "${TARGETS[@]}"; do
  bin="$BUILD/bin/fuzz_$t"
  if [ ! -x "$bin" ]; then
    [ -d "tests/fuzz/corpus/$t" ] && { echo "fuzz: $bin is not built (configure with -DSTOKER_FUZZ=ON)"; failed=1; }
    continue
  fi
  corpus="$BUILD/fuzz/corpus/$t" artifacts="$BUILD/fuzz/artifacts/$t" log="$BUILD/fuzz/$t.log"
  mkdir -p "$corpus" "$artifacts"
  start=$(date +%s)
  status=0
  "$bin" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -max_len=262144 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" "tests/fuzz/corpus/$t" > "$log" 2>&1 || status=$?
  execs=$(grep -h "stat::number_of_executed_units" "$log" | awk '{s+=$2} END {print s+0}')
  cov=$(grep -o "cov: [0-9]*" "$log" | tail -1 | awk '{print $2}')
  ok=true
  if [ "$status" -ne 0 ] || ls "$artifacts" | grep -q .; then
    ok=false
    echo "fuzz: $t FAILED (exit $status) — $(ls "$artifacts" | head -3 | tr '\n' ' ' || true)"
    grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$log" | head -10 || true  # head may close the pipe
    failed=1
  else
    echo "fuzz: $t ok — ${SECONDS_PER_TARGET}s, ${execs:-?} executions, coverage ${cov:-?}, corpus $(ls "$corpus" | wc -l)"
  fi
  results+=("{\"target\": \"$t\", \"seconds\": $(( $(date +%s) - start )), \"executions\": ${execs:-0}, \"coverage\": ${cov:-0}, \"ok\": $ok}")
done
if [ -n "$JSON" ]; then (IFS=,; echo "[${results[*]}]") > "$JSON"; fi
exit $failed
