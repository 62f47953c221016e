#!/usr/bin/env bash
# Runs every libFuzzer target (tests/fuzz) for a fixed budget each, starting from the committed seed corpora, and
# fails on any crash, sanitizer report, leak, timeout (an input taking > 10 s) or out-of-memory (> 2 GiB). Needs a
# build made with -DSTOKER_FUZZ=ON (scripts/sanitize.sh makes build-asan with it). Targets run --jobs at a time (one
# per core by default), each on one core for its whole budget.
#   scripts/fuzz.sh [--seconds 20] [--jobs N] [--build-dir build-asan] [--json FILE] [target ...]
# Findings are kept as $BUILD/fuzz/artifacts/<target>/crash-* (add each as a regression test, then to the
# corpus); the corpus grown by a run stays in $BUILD/fuzz/corpus/<target>.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=20 JOBS=$(nproc) BUILD=build-asan JSON="" TARGETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_PER_TARGET=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --build-dir) BUILD=$2; shift 2 ;;
    --json) JSON=$2; shift 2 ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(control_frame data_frame journal tar jpeg http_request checkpoint manifest \
                                     object_listing seal_trailer metrics_text)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
# OpenCV's pixel limit for non-JPEG images, read when its library loads: what stoker-worker sets for itself
# (worker/main.cc), at the jpeg target's 4 MP.
export OPENCV_IO_MAX_IMAGE_PIXELS=${OPENCV_IO_MAX_IMAGE_PIXELS:-4194304}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

# Fuzzes target $1 for the budget; prints its verdict and writes its JSON result to $BUILD/fuzz/$1.json.
fuzz_one() {
  local t=$1 bin="$BUILD/bin/fuzz_$1" corpus="$BUILD/fuzz/corpus/$1" artifacts="$BUILD/fuzz/artifacts/$1"
  local log="$BUILD/fuzz/$1.log" start status=0 execs cov ok=true
  mkdir -p "$corpus" "$artifacts"
  start=$(date +%s)
  "$bin" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -max_len=262144 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" "tests/fuzz/corpus/$t" > "$log" 2>&1 || status=$?
  execs=$(awk '/stat::number_of_executed_units/ {s+=$2} END {print s+0}' "$log")  # absent when it crashed
  cov=$(awk '/cov: [0-9]/ {for (i = 1; i < NF; i++) if ($i == "cov:") c=$(i+1)} END {print c}' "$log")
  if [ "$status" -ne 0 ] || ls "$artifacts" | grep -q .; then
    ok=false
    { echo "fuzz: $t FAILED (exit $status) — $(ls "$artifacts" | head -3 | tr '\n' ' ' || true)"
      grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$log" | head -10 || true; }  # head may close the pipe
  else
    echo "fuzz: $t ok — ${SECONDS_PER_TARGET}s, ${execs:-?} executions, coverage ${cov:-?}, corpus $(ls "$corpus" | wc -l)"
  fi
  echo "{\"target\": \"$t\", \"seconds\": $(( $(date +%s) - start )), \"executions\": ${execs:-0}, \"coverage\": ${cov:-0}, \"ok\": $ok}" \
    > "$BUILD/fuzz/$t.json"
}

failed=0
ran=()
mkdir -p "$BUILD/fuzz"
for t in "${TARGETS[@]}"; do
  if [ ! -x "$BUILD/bin/fuzz_$t" ]; then
    [ -d "tests/fuzz/corpus/$t" ] && { echo "fuzz: $BUILD/bin/fuzz_$t is not built (configure with -DSTOKER_FUZZ=ON)"; failed=1; }
    continue
  fi
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done  # a free core; verdicts are read below
  rm -f "$BUILD/fuzz/$t.json"
  fuzz_one "$t" &
  ran+=("$t")
done
wait
for t in "${ran[@]}"; do grep -q '"ok": true' "$BUILD/fuzz/$t.json" 2>/dev/null || failed=1; done
if [ -n "$JSON" ]; then
  (IFS=,; results=(); for t in "${ran[@]}"; do results+=("$(cat "$BUILD/fuzz/$t.json" 2>/dev/null || echo "{\"target\": \"$t\", \"ok\": false}")"); done; echo "[${results[*]}]") > "$JSON"
fi
exit $failed
