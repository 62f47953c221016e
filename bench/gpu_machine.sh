#!/usr/bin/env bash
# The benchmarks on the GPU machine (16 cores), in one call, beside the peers' scripts. Run from the repository
# root after scripts/bundle-gpu.sh has filled .bundle/ (carried by the device tool):
#   bash .bundle/gpu_machine.sh                          every section
#   SECTIONS="recovery control" bash .bundle/gpu_machine.sh   some of them
# Sections: machine pipeline scaling transport recovery control peers observability. Results: $OUT/*.json, $OUT/gpu_machine.log.
# LD_LIBRARY_PATH is set for our binaries only: PyTorch on that machine must keep its own libraries.
set -uo pipefail
BUNDLE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/stoker-out}
SECTIONS=${SECTIONS:-machine pipeline scaling transport recovery control peers observability}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_machine.log") 2>&1
ours() { LD_LIBRARY_PATH="$BUNDLE/lib" "$@"; }
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
section done

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
