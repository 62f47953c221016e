#!/usr/bin/env bash
# The benchmarks on the GPU machine (16 cores), in one call, beside the peers' scripts. Run from the repository
# root after scripts/bundle-gpu.sh has filled .bundle/ (carried by the device tool):
#   bash .bundle/gpu_machine.sh                          every section
#   SECTIONS="recovery control" bash .bundle/gpu_machine.sh   some of them
# Sections: machine pipeline scaling transport recovery control peers observability (the default set), before (this
# build's client benchmarks against an earlier build's, when the bundle has one), and the GPU
# client's: client (its GPU tests, under compute-sanitizer memcheck and racecheck too, and the Python package's test
# with PyTorch), feed (seal_bench, then gpu_feed_bench), headline (bench/resnet_headline.py), nccl (two GPUs: CollectiveTest and
# nccl_bench), lightning (the package's PyTorch tests with Lightning installed, then bench/lightning_bench.py: the
# Lightning example vs synthetic input, and a mid-epoch checkpoint resumed through Lightning's checkpointing), scale
# (bench/scale_bench.py: ResNet-18 on one GPU fed by more worker cores than a node's share, then ResNet-50 with DDP
# on every GPU; for the machines with 32 or more cores: SCALE_WORKERS 8,16,32,48 on 64; SCALE_WORKERS= or
# SCALE_DDP_WORKERS= empty skips that part; SCALE_DDP_GPUS 2 runs DDP on two of the GPUs), elastic
# (bench/elastic_bench.py: ResNet-50 with DDP on N GPUs resumed on N - 1 and back on N, exact, against synthetic;
# ELASTIC_WORKERS, ELASTIC_GPUS), elastic-live (python/tests/elastic_test.py, then the PyTorch tests), feed-curve
# (gpu_feed_bench end to end at FEED_CURVE's worker counts: the client's cost against its rate; FEED_STREAMS="0 1"
# with opening streamed into the pinned slots and not, alternating), gpu-decode (cut_bench on one core of this host,
# q96 4:4:4 and 4:2:0, then bench/gpu_decode_rate.py: torchvision's batched nvJPEG decode of the files and of the
# cuts).
# Results: $OUT/*.json, $OUT/gpu_machine.log.
# LD_LIBRARY_PATH is set for our binaries only: PyTorch on that machine must keep its own libraries.
set -uo pipefail
BUNDLE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/stoker-out}
SECTIONS=${SECTIONS:-machine pipeline scaling transport recovery control peers observability}
mkdir -p "$OUT" /tmp/stoker-logs
exec > >(tee -a "$OUT/gpu_machine.log") 2>&1
ours() { LD_LIBRARY_PATH="$BUNDLE/lib" "$@"; }
# NCCL for the client's collectives: the copy PyTorch's wheel brings (nvidia-nccl-cu13), unless one is named.
if [ -z "${STOKER_NCCL_LIBRARY:-}" ]; then
  STOKER_NCCL_LIBRARY=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)
  export STOKER_NCCL_LIBRARY
fi
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on these machines (device README)
want() { [[ " $SECTIONS " == *" $1 "* ]]; }
section() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

if want machine; then
  section machine
  nproc; grep -m1 "model name" /proc/cpuinfo; free -g | head -2; nvidia-smi -L
  python3 -c 'import torch, cv2; print("torch", torch.__version__, "opencv", cv2.__version__)'
  ours "$BUNDLE/bin/client_test" --gtest_filter='GpuProbe*' 2>&1 | tail -4
  ours "$BUNDLE/bin/worker_pipeline_test" 2>&1 | tail -2
fi

if want pipeline; then
  section "pipeline vs decode-only, one core (same images, same run)"
  mkdir -p /tmp/pipeline_images
  ours taskset -c 2 "$BUNDLE/bin/pipeline_bench" --images 200 --seconds 4 --dump-dir /tmp/pipeline_images \
    --json "$OUT/pipeline.json"
  # The brief's baseline, OpenCV imdecode, measured by opencv-python on the very same files (our bundle carries
  # no imgcodecs), pinned to the same core, right after.
  taskset -c 2 python3 - "$OUT/imdecode.json" <<'PY'
import cv2, glob, json, sys, time, numpy as np
cv2.setNumThreads(1)
blobs = [np.frombuffer(open(p, "rb").read(), np.uint8) for p in sorted(glob.glob("/tmp/pipeline_images/*.jpg"))]
for b in blobs: cv2.imdecode(b, cv2.IMREAD_COLOR)
n, t = 0, time.perf_counter()
while time.perf_counter() - t < 4:
    for b in blobs: cv2.imdecode(b, cv2.IMREAD_COLOR); n += 1
rate = n / (time.perf_counter() - t)
print(f"OpenCV {cv2.__version__} imdecode (python), one core: {rate:.0f} img/s")
json.dump({"opencv_python": cv2.__version__, "imdecode_img_s": rate}, open(sys.argv[1], "w"))
PY
fi

if want scaling; then
  section "worker scaling 1..15 single-thread workers"
  ours "$BUNDLE/bin/scaling_bench" --workers 1,2,4,8,12,15 --images 3000 --seconds 8 --dir /tmp/scaling \
    --json "$OUT/scaling.json"
fi

if want transport; then
  section "worker -> client vs raw ZeroMQ, loopback"
  ours "$BUNDLE/bin/transport_bench" --batch-size 64 --seconds 6 --workers 2 --worker-threads 2 \
    --json "$OUT/transport64.json"
  ours "$BUNDLE/bin/transport_bench" --batch-size 256 --seconds 6 --workers 2 --worker-threads 2 \
    --json "$OUT/transport256.json"
fi

if want recovery; then
  section "one worker kill: recovery time and epoch-time cost (2-minute runs)"
  ours "$BUNDLE/bin/recovery_bench" --workers 8 --batch-size 64 --seconds ${RECOVERY_SECONDS:-120} \
    --images 2000 --dir /tmp/recovery --json "$OUT/recovery.json"
fi

if want control; then
  section "coordinator control plane on one core, 1,000 workers + 1,000 clients, journal on"
  ours "$BUNDLE/bin/control_plane_bench" --workers 1000 --jobs 10 --threads 6 --seconds 10 --cpu 0 \
    --dir /tmp/control --json "$OUT/control_plane.json"
fi

if want peers && [ -f "$BUNDLE/peers/anchor_torch.py" ]; then
  section "peers: torchvision / DataLoader (shared/bench/anchor_torch.py)"
  (cd "$BUNDLE/peers" && PYTHONUNBUFFERED=1 N_IMAGES=${N_IMAGES:-2000} timeout 300 python3 anchor_torch.py 2>&1 | tail -30)
fi

if want client; then
  section "GPU client: client_test (GPU tests run here), compute-sanitizer memcheck + racecheck, the Python package"
  export STOKER_TEST_FAKE_NVML="$BUNDLE/bin/libfake_nvml.so" STOKER_TEST_C_LIBRARY="$BUNDLE/python/stoker/lib/libstoker_c.so"
  ours "$BUNDLE/bin/client_test" > /tmp/stoker-logs/client_test.log 2>&1
  echo "client_test exit $?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|Failure|^/work" /tmp/stoker-logs/client_test.log | tail -30
  filter='ConvertKernel*:LoaderTest.Gpu*:LoaderTest.ConsumerStream*'
  for tool in memcheck racecheck; do
    echo "--- compute-sanitizer --tool $tool ($filter)"
    ours timeout ${SANITIZER_TIMEOUT:-150} compute-sanitizer --tool $tool --error-exitcode 99 \
      "$BUNDLE/bin/client_test" --gtest_filter="$filter" > "/tmp/stoker-logs/sanitizer-$tool.log" 2>&1
    echo "exit $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED|SKIPPED" "/tmp/stoker-logs/sanitizer-$tool.log" | tail -6
  done
  echo "--- python/tests/loader_test.py with PyTorch (no LD_LIBRARY_PATH: the package preloads its vendored libraries)"
  PYTHONPATH="$BUNDLE/python" timeout 300 python3 "$BUNDLE/tests/loader_test.py" \
    --bin-dir "$BUNDLE/bin" --server-lib-dir "$BUNDLE/lib" 2>&1 | tail -15
fi

if want feed; then
  section "GPU feed: H2D + normalise vs raw cudaMemcpyAsync; staging vs memcpy; client CPU per img/s"
  ours "$BUNDLE/bin/seal_bench" --json "$OUT/seal.json"
  # End to end sealed (the default) and --insecure in the same run: what sealing costs the client.
  ours "$BUNDLE/bin/gpu_feed_bench" --json "$OUT/gpu_feed.json" --seconds ${FEED_SECONDS:-10} --workers 4 \
    --worker-threads 3
fi

# The client's cost against the rate it is fed at: gpu_feed_bench end to end (sealed and --insecure in each run)
# with more skip-decode workers each time, all on this host beside the client (FEED_CURVE: workers x threads), for
# FEED_ROUNDS rounds; with FEED_STREAMS="0 1", each shape with opening streamed into the pinned slots and not,
# alternating (STOKER_OPEN_STREAM; empty: the build's default for this CPU), after seal_bench.
if want feed-curve; then
  section "GPU feed: client CPU per 20,000 img/s against the rate (${FEED_CURVE:-1x1 1x2 2x2 4x3}; streams: ${FEED_STREAMS:-default})"
  lscpu | grep -E "^(CPU\(s\)|Thread|Core|Socket|Model name|L2|L3)"
  [ -z "${FEED_STREAMS:-}" ] || ours "$BUNDLE/bin/seal_bench" --json "$OUT/seal-stream.json" | tail -4
  for round in $(seq "${FEED_ROUNDS:-1}"); do
    for shape in ${FEED_CURVE:-1x1 1x2 2x2 4x3}; do
      for stream in ${FEED_STREAMS:-default}; do
        echo "--- round $round, $shape workers x threads, STOKER_OPEN_STREAM=$stream"
        [ "$stream" = default ] && unset STOKER_OPEN_STREAM || export STOKER_OPEN_STREAM=$stream
        ours "$BUNDLE/bin/gpu_feed_bench" --seconds ${FEED_SECONDS:-6} \
          --json "$OUT/feed-$shape-r$round-stream-$stream.json" --workers "${shape%x*}" \
          --worker-threads "${shape#*x}" 2>&1 | sed -n '/^3\. end to end/,$p' | grep -E "img/s|by thread"
      done
    done
  done
  unset STOKER_OPEN_STREAM
fi

if want gpu-decode; then
  section "gpu_decode: the worker's file and cut against the CPU pipeline on one core, then the GPU's decode rate of each"
  for chroma in 444 420; do
    flag=$([ $chroma = 420 ] && echo --420 || true)
    ours taskset -c 2 "$BUNDLE/bin/cut_bench" --images 200 --seconds 5 $flag --dump-dir /tmp/cutdump-$chroma \
      --json "$OUT/cut_bench_$chroma.json"
    python3 "$BUNDLE/gpu_decode_rate.py" --dir /tmp/cutdump-$chroma --batch 256 --seconds 10 \
      --json "$OUT/gpu_decode_rate_$chroma.json"
  done
fi

# The client's benchmarks for this build against an earlier one (.bundle/old/bin, BEFORE=<its revision>, made by
# scripts/bundle-gpu.sh when STOKER_BUNDLE_BEFORE names a build directory), alternating, on the same machine: what
# a refactoring may not cost. Each binary starts the coordinator and workers beside it, of its own build.
if want before && [ -x "$BUNDLE/old/bin/transport_bench" ]; then
  section "this build against ${BEFORE:-the earlier one}: transport_bench and gpu_feed_bench, alternating"
  for round in 1 2; do
    for build in old new; do
      dir="$BUNDLE/bin"; [ "$build" = old ] && dir="$BUNDLE/old/bin"
      ours "$dir/transport_bench" --batch-size 256 --seconds 5 --workers 2 --worker-threads 2 \
        --json "$OUT/before-transport-$build-$round.json" | tail -3
      ours "$dir/gpu_feed_bench" --json "$OUT/before-feed-$build-$round.json" --seconds 5 --workers 4 \
        --worker-threads 3 | tail -8
    done
  done
fi

if want headline; then
  section "headline: ResNet-50 fed by (c) synthetic, (a) DataLoader x15, (b) stoker on the same 16 cores"
  python3 "$BUNDLE/resnet_headline.py" --bundle "$BUNDLE" --peers "$BUNDLE/peers" --examples "$BUNDLE/examples" \
    --workers "${HEADLINE_WORKERS:-8,10}" --data-planes "${HEADLINE_PLANES:-sealed,insecure}" --out "$OUT"
fi

if want lightning; then
  section "Lightning: the PyTorch tests, then ResNet-50 on stoker vs synthetic input and a resumed mid-epoch checkpoint"
  python3 -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__)'
  python3 -c 'import lightning; print("lightning", lightning.__version__)' 2>/dev/null \
    || python3 -c 'import pytorch_lightning; print("pytorch_lightning", pytorch_lightning.__version__)' \
    || echo "no Lightning on this machine: the Lightning test skips and the benchmark cannot run"
  PYTHONPATH="$BUNDLE/python" timeout 300 python3 "$BUNDLE/tests/torch_test.py" \
    --bin-dir "$BUNDLE/bin" --server-lib-dir "$BUNDLE/lib" 2>&1 | tail -12
  timeout 480 python3 "$BUNDLE/lightning_bench.py" --bundle "$BUNDLE" --out "$OUT" \
    --workers "${LIGHTNING_WORKERS:-14}" 2>&1 | grep -vE "^(generating|indexing):"
fi

# Live shape changes (python/tests/elastic_test.py) and the PyTorch tests, Lightning's resumed on one device fewer
# among them, with this machine's PyTorch and Lightning.
if want elastic-live; then
  section "live shape changes, then the PyTorch tests with Lightning"
  PYTHONPATH="$BUNDLE/python" timeout 240 python3 "$BUNDLE/tests/elastic_test.py" \
    --bin-dir "$BUNDLE/bin" --server-lib-dir "$BUNDLE/lib" 2>&1 | grep -vE "ResourceWarning|tracemalloc|^  " | tail -8
  PYTHONPATH="$BUNDLE/python" timeout 420 python3 "$BUNDLE/tests/torch_test.py" \
    --bin-dir "$BUNDLE/bin" --server-lib-dir "$BUNDLE/lib" 2>&1 | tail -14
fi

if want scale; then
  section "workers apart from GPUs: one GPU fed by SCALE_WORKERS workers, then DDP on every GPU"
  timeout 580 python3 "$BUNDLE/scale_bench.py" --bundle "$BUNDLE" --peers "$BUNDLE/peers" --examples "$BUNDLE/examples" \
    --workers "${SCALE_WORKERS-8,16,24,30}" --ddp-workers "${SCALE_DDP_WORKERS-12,16,20}" \
    --ddp-gpus "${SCALE_DDP_GPUS:-0}" --name "${SCALE_NAME:-scale}" --out "$OUT" 2>&1 \
    | grep -vE "^epoch [0-9]+ step"
fi

if want elastic; then
  section "a DDP job resumed on one GPU fewer and back (ELASTIC_WORKERS workers), exact, against synthetic"
  timeout 580 python3 "$BUNDLE/elastic_bench.py" --bundle "$BUNDLE" --peers "$BUNDLE/peers" --examples "$BUNDLE/examples" \
    --workers "${ELASTIC_WORKERS:-16}" --gpus "${ELASTIC_GPUS:-0}" --out "$OUT" 2>&1 | grep -vE "^epoch [0-9]+ step"
fi

if want nccl; then
  section "two GPUs: CollectiveTest, then nccl_bench"
  ours "$BUNDLE/bin/client_test" --gtest_filter='Collective*:LoaderTest.GpuConsumerStreamOfAnotherDevice*' 2>&1 | tail -24
  ours "$BUNDLE/bin/nccl_bench" --json "$OUT/nccl.json" --seconds ${NCCL_SECONDS:-8}
fi
if want observability; then
  section "observability with the real NVML: a demo whose ranks feed GPU 0, its client /metrics beside nvidia-smi"
  rm -rf /tmp/obs-demo /tmp/obs-targets.json
  ours "$BUNDLE/bin/stoker" demo --data /tmp/obs-demo --images 1024 --workers 4 --batch-size 32 --gpus 1 \
    --epochs 200 --step-ms 20 --prometheus-targets /tmp/obs-targets.json --summary-json "$OUT/obs-demo.json" \
    > "$OUT/obs-demo.log" 2>&1 &
  demo=$!
  python3 - "$OUT" <<'PY'
import json, os, sys, time, urllib.request
out = sys.argv[1]
deadline = time.time() + 120
while time.time() < deadline:
    try:
        groups = json.load(open("/tmp/obs-targets.json"))
        if any(g["labels"]["job"] == "stoker-client" for g in groups):
            break
    except (OSError, ValueError):
        pass
    time.sleep(0.5)
else:
    sys.exit("no client endpoint within 120 s")
time.sleep(5)  # let the clients take a few batches
for g in groups:
    job, addr = g["labels"]["job"], g["targets"][0]
    text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=10).read().decode()
    open(os.path.join(out, f"metrics-{job}-{g['labels']['pod']}.txt"), "w").write(text)
    for path in ("/healthz", "/readyz"):
        try:
            code = urllib.request.urlopen(f"http://{addr}{path}", timeout=10).status
        except urllib.error.HTTPError as e:
            code = e.code
        print(job, path, code)
    if job == "stoker-client":
        print("\n".join(l for l in text.splitlines() if l.startswith(("stoker_gpu_", "stoker_client_info"))))
PY
  nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total --format=csv
  kill -INT $demo; wait $demo; echo "demo exit $? (interrupted on purpose)"
  tr '\r' '\n' < "$OUT/obs-demo.log" | grep -E "^(metrics|epoch)" | tail -3
fi

section done
# Logs (only a few files come back from the machine): one archive.
tar czf "$OUT/logs.tgz" --exclude='keys*' --exclude='*.key' -C /tmp stoker-logs \
  $(cd /tmp && ls -d stoker-headline stoker-scale stoker-lightning/*.{log,json} 2>/dev/null) 2>/dev/null
