#!/usr/bin/env python3
"""Workers scale apart from GPUs (bench/RESULTS.md section 14): one GPU fed by more worker cores than its node's
share, and every GPU of the machine under DDP. The extra cores of a big machine stand in for CPU pods on other nodes.

Placement: each trainer process on cores of its own (--trainer-cores per rank, from core 0; under torchrun each
rank pins itself by LOCAL_RANK), the coordinator on the next core, then one core per single-thread worker.

Part 1, one GPU (--arch, ResNet-18 by default: a model fast enough to outrun a 16-core node): the model on
synthetic GPU-resident input (its demand, examples/train_resnet50.py --synthetic), then stoker with each worker
count of --workers, single-thread workers pinned to cores the trainer does not use. For each: img/s against
synthetic, the GPU input stall, and the coordinator's advice (its /state, sampled at every progress line of the
measured window: recommended workers, the pool's busy fraction, a waiting job's bottleneck) against the smallest
count that removed the stall (>= 0.95x, stall <= 3 %). Pool efficiency: img/s over min(synthetic, workers x one
worker's rate at full busy, which the coordinator measures in the same run).

Part 2, every GPU (--ddp-arch, ResNet-50): torchrun with one process per GPU and DistributedDataParallel, on
synthetic input and then fed by stoker with each count of --ddp-workers; per-GPU stall from each rank's Loader and
each rank's wait for its batches (p50/p99 per step: DDP steps in lockstep, so a late batch on any rank stalls all).
Where the cores go (bench/thread_cpu.py) per role, the trainers' processes counted with the trainer.

    python3 bench/scale_bench.py --bundle .bundle --peers .bundle/peers --workers 8,16,24,30 --ddp-workers 12,16,20

Needs: .bundle from scripts/bundle-gpu.sh, PyTorch and torchvision, the peers' gen_jpegs.py for the JPEGs. Data
plane: sealed by default (docs/operations.md section 9; --data-plane insecure for everything --insecure). Writes
OUT/NAME.json (--name, default scale); process logs under --logs.
"""
import json
import os
import statistics
import subprocess
import sys

import resnet_headline
from resnet_headline import log


def gpus():
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def trainer_cmd(args, launcher, arch, extra):
    return launcher + [os.path.join(args.examples, "train_resnet50.py"), f"--arch={arch}",
                       f"--batch-size={args.batch_size}", f"--warmup={args.warmup}", f"--seconds={args.seconds}",
                       f"--print-every={args.print_every}", f"--cpu-threads={args.trainer_threads}",
                       f"--rank-cores={args.trainer_cores}"] + extra


def launcher(ranks):
    if ranks == 1:
        return [sys.executable]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]


def summaries(pattern, ranks):
    out = []
    for r in range(ranks):
        with open(pattern.replace("{rank}", str(r))) as f:
            out.append(json.load(f))
    return out


def run_synthetic(args, arch, ranks, trainer_cores, env):
    pattern = os.path.join(args.logs, f"synthetic-{arch}-{ranks}-{{rank}}.json")
    cmd = trainer_cmd(args, launcher(ranks), arch, ["--synthetic", f"--json={pattern}"])
    log(f"{arch} on synthetic input, {ranks} GPU(s): " + " ".join(cmd[1:]))
    rc, _ = resnet_headline.run_profiled(cmd, env, args.timeout, trainer_cores)
    if rc != 0:
        sys.exit(f"the synthetic run exited with {rc}")
    return summaries(pattern, ranks)


def run_stoker(args, arch, ranks, workers, demand, manifest, trainer_cores, base_env):
    coordinator_core = max(trainer_cores) + 1  # its own core: beside a trainer it delays every rank's leases
    first = coordinator_core + 1
    if first + workers > os.cpu_count():
        sys.exit(f"{workers} workers do not fit on cores {first}..{os.cpu_count() - 1}")
    tag = f"{arch}-{ranks}gpu-{workers}w"
    cluster = resnet_headline.start_cluster(args, manifest, os.path.join(args.logs, tag), workers,
                                            args.data_plane == "insecure", {coordinator_core},
                                            [{first + i} for i in range(workers)])
    advice, bottlenecks = [], []

    def sample_advice():
        state = cluster.state()
        if state:
            advice.append(state["advice"])
            job = next((j for j in state.get("jobs", []) if j.get("name") == tag), {})
            bottlenecks.append(job.get("input", {}).get("why", ""))

    try:
        pattern = os.path.join(args.logs, f"stoker-{tag}-{{rank}}.json")
        steps_per_epoch = args.images // (args.batch_size * ranks)
        steps = args.warmup + args.seconds * demand / (args.batch_size * ranks) * 1.5
        epochs = int(steps // steps_per_epoch) + 2
        cmd = trainer_cmd(args, launcher(ranks), arch, [
            f"--coordinator={cluster.endpoint}", f"--job={tag}", f"--manifest={manifest}", f"--epochs={epochs}",
            f"--prefetch={2 * workers // ranks + 4}",  # every worker busy, with batches to spare (as the headline)
            f"--json={pattern}"])
        log(f"{arch}, {ranks} GPU(s), stoker with {workers} workers on cores {first}..{first + workers - 1}: "
            + " ".join(cmd[1:]))
        rc, cpu = resnet_headline.run_profiled(cmd, dict(base_env, **cluster.client_env), args.timeout,
                                               trainer_cores, on_progress=sample_advice)
        if rc != 0:
            sys.exit(f"the stoker run exited with {rc}: logs in {cluster.work}")
    finally:
        cluster.stop()
    results = summaries(pattern, ranks)
    for r in results:
        if r["loader"]["connected_workers"] != workers:
            sys.exit(f"rank {r['rank']} had {r['loader']['connected_workers']} of {workers} workers: {cluster.work}")
    return {"workers": workers, "ranks": results, "thread_cpu": cpu, "advice_samples": advice,
            "bottlenecks": bottlenecks}


def judge(points, synthetic_rate):
    """img/s (all GPUs), ratio to synthetic, worst per-GPU stall, pool efficiency; the smallest count meeting
    >= 0.95x and <= 3 %."""
    met = None
    for p in points:
        p["img_s"] = sum(r["images_per_second"] for r in p["ranks"])
        p["ratio"] = p["img_s"] / synthetic_rate
        p["stall_by_gpu"] = [r["gpu_input_stall_fraction"] for r in p["ranks"]]
        late = [a for a in p["advice_samples"][len(p["advice_samples"]) // 2:]]  # the estimator's window has filled
        per_worker = [a["worker_capacity_samples_per_second"] for a in late
                      if isinstance(a.get("worker_capacity_samples_per_second"), (int, float))]
        busy = [a["worker_busy_ratio"] for a in late if isinstance(a.get("worker_busy_ratio"), (int, float))]
        p["worker_rate"] = statistics.median(per_worker) if per_worker else None
        p["worker_busy"] = statistics.median(busy) if busy else None
        if p["worker_rate"]:
            p["pool_efficiency"] = p["img_s"] / min(synthetic_rate, p["workers"] * p["worker_rate"])
        if p["ratio"] >= 0.95 and max(p["stall_by_gpu"]) <= 0.03 and met is None:
            met = p["workers"]
    return met


def recommended(point):
    """The advice's last sample, and its median over the window's second half (the estimator's 30 s has filled),
    with the job's bottleneck when it waited."""
    samples = [a["recommended_workers"] for a in point["advice_samples"]]
    if not samples:
        return "-"
    causes = [b for b in point.get("bottlenecks", [])[len(samples) // 2:] if b]
    cause = f" {statistics.mode(causes)}" if causes else ""
    return f"{samples[-1]} ({statistics.median(samples[len(samples) // 2:])}){cause}"


def print_table(title, synthetic_rate, points, met):
    print(f"\n{title}")
    print(f"{'feed':20s} {'img/s':>7s} {'vs synth':>8s} {'pool eff':>8s} {'busy':>5s} {'GPU stall per GPU':>26s} "
          f"{'wait p50/p99 ms per GPU':>30s}  recommended")
    print(f"{'synthetic':20s} {synthetic_rate:7.0f} {1:8.3f}")
    for p in points:
        stall = " ".join(f"{100 * s:.1f}%" for s in p["stall_by_gpu"])
        waits = " ".join(f"{r['host_wait_ms']['p50']:.0f}/{r['host_wait_ms']['p99']:.0f}" for r in p["ranks"]
                         if "host_wait_ms" in r)
        eff = f"{p['pool_efficiency']:.3f}" if p.get("pool_efficiency") else "-"
        busy = f"{100 * p['worker_busy']:.0f}%" if p.get("worker_busy") is not None else "-"
        cores = p["thread_cpu"]["cores_by_role"] if p.get("thread_cpu") else {}
        print(f"{'stoker, %d workers' % p['workers']:20s} {p['img_s']:7.0f} {p['ratio']:8.3f} {eff:>8s} {busy:>5s} "
              f"{stall:>26s} {waits:>30s}  {recommended(p)}")
        if cores:
            print(f"{'':20s} cores: {cores}")
    print(f"removed the stall (>= 0.95x, <= 3 %): {f'{met} workers' if met else 'no count tried'}; "
          "pool eff = img/s / min(synthetic, workers x one worker's rate); recommended = last sample (median of "
          "the window's second half) and the bottleneck the coordinator named")


def main():
    p = resnet_headline.bundle_arguments(__doc__)
    p.add_argument("--arch", default="resnet18", help="part 1's model (one GPU)")
    p.add_argument("--workers", default="8,16,24,30", help="part 1's worker counts (empty: skip part 1)")
    p.add_argument("--ddp-arch", default="resnet50", help="part 2's model (every GPU, DDP)")
    p.add_argument("--ddp-workers", default="", help="part 2's worker counts (empty: skip part 2)")
    p.add_argument("--ddp-gpus", type=int, default=0, help="part 2's GPUs (0: every GPU of the machine)")
    p.add_argument("--data-plane", choices=["sealed", "insecure"], default="sealed")
    p.add_argument("--images", type=int, default=8192, help="JPEGs (the peers' gen_jpegs.py)")
    p.add_argument("--batch-size", type=int, default=256, help="per GPU")
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--seconds", type=float, default=30,
                   help="measured seconds per run (the coordinator's advice looks at its last 30 s)")
    p.add_argument("--print-every", type=int, default=20)
    p.add_argument("--trainer-cores", type=int, default=2, help="cores per trainer process (workers go after)")
    p.add_argument("--trainer-threads", type=int, default=2, help="PyTorch intra-op threads per trainer")
    p.add_argument("--timeout", type=int, default=240, help="seconds per run")
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/stoker-out"))
    p.add_argument("--name", default="scale", help="the results file: OUT/NAME.json")
    p.add_argument("--logs", default="/tmp/stoker-scale")
    args = p.parse_args()
    sys.path[:0] = [os.path.join(args.bundle, "tests"), os.path.join(args.bundle, "python")]
    os.makedirs(args.logs, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)

    data = "/tmp/scale_jpegs"
    log(f"{args.images} JPEGs under {data} (the peers' gen_jpegs.py), indexed by stoker index")
    subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {args.peers!r}); import gen_jpegs; "
                    f"gen_jpegs.generate({data!r}, {args.images})"], check=True, timeout=600)
    manifest = "/tmp/scale.stoker"
    subprocess.run([os.path.join(args.bundle, "bin", "stoker"), "index", os.path.join(data, "train"), "-o", manifest],
                   env=resnet_headline.server_env(args), check=True, timeout=300, stdout=subprocess.DEVNULL)
    env = resnet_headline.trainer_env(args)
    ranks = gpus()
    result = {"cores": os.cpu_count(), "gpus": ranks, "data_plane": args.data_plane, "batch_size": args.batch_size,
              "trainer_cores": args.trainer_cores, "trainer_threads": args.trainer_threads}

    counts = [int(x) for x in args.workers.split(",") if x]
    if counts:
        one = dict(env, CUDA_VISIBLE_DEVICES="0")
        cores = set(range(args.trainer_cores))
        synthetic = run_synthetic(args, args.arch, 1, cores, one)[0]
        points = [run_stoker(args, args.arch, 1, w, synthetic["images_per_second"], manifest, cores, one)
                  for w in counts]
        met = judge(points, synthetic["images_per_second"])
        result["one_gpu"] = {"arch": args.arch, "device": synthetic["device"],
                             "synthetic_img_s": synthetic["images_per_second"], "points": points,
                             "removed_stall_at": met}
        print_table(f"{args.arch}, one {synthetic['device']}, batch {args.batch_size}, {os.cpu_count()} cores, "
                    f"{args.data_plane} data plane", synthetic["images_per_second"], points, met)
        write(args, result)

    counts = [int(x) for x in args.ddp_workers.split(",") if x]
    if counts:
        if 0 < args.ddp_gpus < ranks:
            ranks = args.ddp_gpus
            env = dict(env, CUDA_VISIBLE_DEVICES=",".join(str(g) for g in range(ranks)))
            result["gpus"] = ranks
        cores = set(range(args.trainer_cores * ranks))
        synthetic = run_synthetic(args, args.ddp_arch, ranks, cores, env)
        rate = sum(r["images_per_second"] for r in synthetic)
        points = [run_stoker(args, args.ddp_arch, ranks, w, rate, manifest, cores, env) for w in counts]
        met = judge(points, rate)
        result["ddp"] = {"arch": args.ddp_arch, "gpus": ranks, "device": synthetic[0]["device"],
                         "synthetic_img_s": rate, "synthetic_by_gpu": [r["images_per_second"] for r in synthetic],
                         "points": points, "removed_stall_at": met}
        print_table(f"{args.ddp_arch}, DDP on {ranks} x {synthetic[0]['device']}, batch {args.batch_size} per GPU",
                    rate, points, met)
    write(args, result)


def write(args, result):
    with open(os.path.join(args.out, f"{args.name}.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
