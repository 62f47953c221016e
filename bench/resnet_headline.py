#!/usr/bin/env python3
"""The headline: ResNet-50 training on one GPU with the machine's cores, fed three ways in one run —
(c) synthetic GPU-resident input (the GPU's demand) and (a) a 15-worker PyTorch DataLoader, both measured by the
peers' script (shared/bench/anchor_resnet.py, the same model, batch, bf16 autocast and channels_last), then (b)
stoker: a coordinator and N single-thread worker processes on this same machine, feeding
examples/train_resnet50.py through the Python package. Same JPEGs for (a) and (b): the anchor's ImageFolder tree,
indexed by `stoker index`. Goals: (b) >= 0.95 x (c) with input stall <= 3 % (bench/RESULTS.md section 7c); >= 0.98 x (c)
with stall <= 2 % from <= 10 workers (section 12b).

Placement, as docs/operations.md recommends for a trainer sharing its node with workers: the trainer process is
pinned to --trainer-cores cores (0, 1, ...) and runs PyTorch with that many intra-op threads (train_resnet50.py
--cpu-threads), the coordinator shares core 0, and each worker gets a core of its own after them (--no-pin: none
of this, the scheduler places everything).

    python3 bench/resnet_headline.py --bundle .bundle --peers .bundle/peers --workers 8,10 --data-planes sealed,insecure

Needs: .bundle from scripts/bundle-gpu.sh (bin/ and lib/ for the servers, python/ the package with its libraries),
PyTorch and torchvision. Writes OUT/headline.json (and the anchor's OUT/anchor_resnet.json); process logs and each
run's summary under --logs.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import thread_cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def placement(args, workers):
    """Cores for the trainer, the coordinator and each worker: the trainer first, a core per worker after it."""
    n = os.cpu_count()
    if not args.pin:
        return None, None, [None] * workers
    trainer = set(range(min(args.trainer_cores, n)))
    return trainer, {0}, [{(args.trainer_cores + i) % n} for i in range(workers)]


def run_profiled(cmd, env, timeout, cores=None, on_progress=None):
    """Runs the trainer, echoing its output, and measures every thread's CPU time on the machine between its first
    and its last progress line of the measured window (bench/thread_cpu.py): where the cores go while it trains.
    A snapshot reads every thread of /proc, so it is taken (and on_progress() called) at most once a second: this
    process is not pinned and must not take the workers' cores."""
    import support  # python/tests/support.py (the bundle's tests/)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=support.pinned(cores))
    first = last = None
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        print(line, end="", flush=True)
        if line.startswith("epoch ") and " step " in line and \
                (first is None or time.monotonic() - (last or first)["time"] >= 1.0):
            if first is None:
                first = thread_cpu.snapshot()
            else:
                last = thread_cpu.snapshot()
            if on_progress:
                on_progress()
        if time.monotonic() > deadline:
            proc.kill()
            break
    returncode = proc.wait()
    cpu = thread_cpu.report(first, last, proc.pid) if first and last else None
    if cpu:
        log(f"cores over {cpu['seconds']} s: {cpu['cores_by_role']}; trainer threads: {cpu['trainer_cores_by_thread']}")
    return returncode, cpu


def server_env(args):
    """Our binaries' environment: the bundle's libraries (PyTorch must keep its own, so only for them)."""
    return dict(os.environ, LD_LIBRARY_PATH=os.path.join(args.bundle, "lib"))


def start_cluster(args, manifest, work, workers, insecure, coordinator_cores, worker_cores):
    """A coordinator and `workers` single-thread workers from the bundle over `manifest` (support.Cluster: keys and
    sealed batches as deployed, or everything --insecure), logs kept under `work`."""
    import support  # python/tests/support.py (the bundle's tests/): the cluster the Python tests use
    return support.Cluster(os.path.join(args.bundle, "bin"), None, workers=workers, manifest=manifest,
                           server_env=server_env(args), work=work, keep=True,
                           coordinator_flags=["--log-level=warning"],
                           worker_flags=["--log-level=warning"], insecure=insecure,
                           coordinator_cores=coordinator_cores, worker_cores=worker_cores)


def run_stoker(args, workers, plane, manifest, logs):
    trainer_cores, coordinator_cores, worker_cores = placement(args, workers)
    cluster = start_cluster(args, manifest, os.path.join(logs, f"{workers}-{plane}"), workers, plane == "insecure",
                            coordinator_cores, worker_cores)
    try:
        summary = os.path.join(logs, f"stoker-{workers}-{plane}.json")
        tenv = trainer_env(args, cluster)
        steps_per_epoch = args.images // args.batch_size
        epochs = (args.warmup + args.steps) // steps_per_epoch + 2
        cmd = [sys.executable, os.path.join(args.examples, "train_resnet50.py"), f"--coordinator={cluster.endpoint}",
               f"--job=headline-{workers}", f"--manifest={manifest}", f"--batch-size={args.batch_size}",
               f"--epochs={epochs}", f"--steps={args.steps}", f"--warmup={args.warmup}", f"--json={summary}",
               "--print-every=40", f"--prefetch={2 * workers + 4}",  # every worker busy, with batches to spare
               f"--cpu-threads={args.trainer_cores if args.pin else 0}"]
        log(f"(b) stoker, {workers} workers, data plane {plane}, "
            f"{'pinned' if args.pin else 'unpinned'}: " + " ".join(cmd[1:]))
        returncode, cpu = run_profiled(cmd, tenv, args.timeout, trainer_cores)
        if returncode != 0:
            sys.exit(f"train_resnet50.py exited with {returncode}")
    finally:
        cluster.stop()
    with open(summary) as f:
        result = json.load(f)
    result["thread_cpu"] = cpu
    connected = result["loader"]["connected_workers"]
    if connected != workers:
        sys.exit(f"only {connected} of {workers} workers were connected to the client: see {cluster.work}/worker*.log")
    return result


def trainer_env(args, cluster=None):
    """The trainer's environment: the bundle's package (which preloads its own libraries: PyTorch keeps its copies,
    so no LD_LIBRARY_PATH) and, with a cluster, its client key and trust file."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env.update(cluster.client_env if cluster else {}, PYTHONPATH=os.path.join(args.bundle, "python"),
               PYTHONUNBUFFERED="1")
    return env


def bundle_arguments(description):
    """A parser with what every GPU-machine script takes: where the bundle, the peers' scripts and examples are."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", default=os.path.join(ROOT, ".bundle"))
    p.add_argument("--peers", default=os.path.join(ROOT, ".bundle", "peers"))
    p.add_argument("--examples", default=os.path.join(ROOT, "examples"))
    return p


def main():
    p = bundle_arguments(__doc__)
    p.add_argument("--workers", default="12,14", help="worker process counts to try (one thread each)")
    p.add_argument("--images", type=int, default=4000, help="JPEGs in the anchor's dataset")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--steps", type=int, default=120, help="measured steps of (b)")
    p.add_argument("--warmup", type=int, default=25)
    p.add_argument("--timeout", type=int, default=300)
    p.add_argument("--skip-anchor", action="store_true", help="reuse OUT/anchor_resnet.json")
    p.add_argument("--data-planes", default="sealed",
                   help="comma-separated: sealed (the default: CURVE control plane, batches sealed with AES-256-GCM) "
                        "and/or insecure (everything --insecure: what security costs)")
    p.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                   help="pin the trainer, the coordinator and each worker to cores (see above)")
    p.add_argument("--trainer-cores", type=int, default=2, help="cores (and PyTorch threads) of the trainer")
    p.add_argument("--name", default="headline", help="write OUT/NAME.json")
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/stoker-out"))
    p.add_argument("--logs", default="/tmp/stoker-headline", help="process logs and per-run summaries")
    args = p.parse_args()
    sys.path[:0] = [os.path.join(args.bundle, "tests"), os.path.join(args.bundle, "python")]
    logs = args.logs
    os.makedirs(logs, exist_ok=True)

    anchor_json = os.path.join(args.out, "anchor_resnet.json")
    if not args.skip_anchor:
        log("(c) synthetic and (a) DataLoader: shared/bench/anchor_resnet.py")
        env = dict(os.environ, OUT=args.out, N_IMAGES=str(args.images), PYTHONUNBUFFERED="1")
        subprocess.run([sys.executable, "anchor_resnet.py"], cwd=args.peers, env=env, check=True, timeout=900)
    with open(anchor_json) as f:
        anchor = json.load(f)
    synthetic = anchor["resnet50_synthetic_img_s"]
    dataloader = anchor["resnet50_dataloader_nw15_img_s"]
    dataloader_wait = anchor["resnet50_dataloader_nw15_input_wait_frac"]

    manifest = "/tmp/anchor.stoker"
    subprocess.run([os.path.join(args.bundle, "bin", "stoker"), "index", "/tmp/anchor_jpegs/train", "-o", manifest],
                   env=server_env(args), check=True, timeout=300, stdout=subprocess.DEVNULL)
    planes = [x for x in args.data_planes.split(",") if x]
    if any(p not in ("sealed", "insecure") for p in planes):
        sys.exit(f"--data-planes: sealed and/or insecure, not {args.data_planes}")
    runs = {}
    for plane in planes:
        for w in [int(x) for x in args.workers.split(",") if x]:
            runs[f"{w}-{plane}"] = (w, plane, run_stoker(args, w, plane, manifest, logs))

    print()
    print(f"ResNet-50, batch {args.batch_size}, bf16 autocast, channels_last, {os.cpu_count()} cores, "
          f"{next(iter(runs.values()))[2]['device'] if runs else ''}, {'pinned' if args.pin else 'unpinned'}")
    print(f"{'feed':44s} {'img/s':>8s} {'vs (c)':>7s} {'host wait':>10s} {'GPU stall':>10s}")
    print(f"{'(c) synthetic, GPU-resident':44s} {synthetic:8.0f} {1:7.3f} {'-':>10s} {'-':>10s}")
    print(f"{'(a) PyTorch DataLoader, 15 workers':44s} {dataloader:8.0f} {dataloader / synthetic:7.3f} "
          f"{100 * dataloader_wait:9.1f}% {'-':>10s}")
    for w, plane, r in runs.values():
        print(f"{'(b) stoker, %d workers x 1 thread, %s' % (w, plane):44s} {r['images_per_second']:8.0f} "
              f"{r['images_per_second'] / synthetic:7.3f} {100 * r['host_input_wait_fraction']:9.1f}% "
              f"{100 * r['gpu_input_stall_fraction']:9.1f}%")
    result = {"synthetic_img_s": synthetic, "dataloader_img_s": dataloader, "dataloader_wait_frac": dataloader_wait,
              "cores": os.cpu_count(), "pinned": args.pin, "trainer_cores": args.trainer_cores,
              "stoker": {key: {"workers": w, "data_plane": plane, "img_s": r["images_per_second"],
                               "ratio_to_synthetic":
                                  r["images_per_second"] / synthetic, "ratio_to_dataloader":
                                  r["images_per_second"] / dataloader,
                                  "host_wait_frac": r["host_input_wait_fraction"],
                                  "gpu_stall_frac": r["gpu_input_stall_fraction"], "summary": r}
                         for key, (w, plane, r) in runs.items()}}
    with open(os.path.join(args.out, f"{args.name}.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
