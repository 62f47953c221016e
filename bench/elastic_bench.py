#!/usr/bin/env python3
"""A DDP job resumed on fewer GPUs and back (bench/RESULTS.md section 16; issue 31): ResNet-50 under torchrun on N
GPUs to a mid-epoch point, its loader state resumed on N - 1 GPUs to another mid-epoch point, and that resumed on N
GPUs to the job's end, all against one coordinator and one pool of workers. Proves the three runs trained on every
sample of every epoch exactly once (`stoker check` over the ranks' delivery logs, judged per shape), and measures
each run's img/s against the same model on synthetic GPU-resident input on as many GPUs, in the same call.

Placement as bench/scale_bench.py: each trainer process on --trainer-cores cores of its own from core 0, the
coordinator on the next core, then one core per single-thread worker.

    python3 bench/elastic_bench.py --bundle .bundle --peers .bundle/peers --workers 16

Writes OUT/elastic.json; process logs under --logs.
"""
import json
import os
import pickle
import subprocess
import sys

import resnet_headline
import scale_bench
from resnet_headline import log


def stage_cmd(args, ranks, extra):
    return scale_bench.trainer_cmd(args, scale_bench.launcher(ranks), args.arch, extra)


def main():
    p = resnet_headline.bundle_arguments(__doc__)
    p.add_argument("--arch", default="resnet50")
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--gpus", type=int, default=0, help="N (0: every GPU of the machine)")
    p.add_argument("--images", type=int, default=8192, help="JPEGs (the peers' gen_jpegs.py)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=256, help="per GPU")
    p.add_argument("--warmup", type=int, default=10, help="steps of each run before its clock starts")
    p.add_argument("--steps", default="40,60", help="measured steps of the first two runs (the third runs to the end)")
    p.add_argument("--synthetic-seconds", type=float, default=12, help="measured seconds of each synthetic run")
    p.add_argument("--print-every", type=int, default=20)
    p.add_argument("--trainer-cores", type=int, default=2)
    p.add_argument("--trainer-threads", type=int, default=2)
    p.add_argument("--timeout", type=int, default=300)
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/stoker-out"))
    p.add_argument("--logs", default="/tmp/stoker-elastic")
    args = p.parse_args()
    sys.path[:0] = [os.path.join(args.bundle, "tests"), os.path.join(args.bundle, "python")]
    os.makedirs(args.logs, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    n = args.gpus or scale_bench.gpus()
    if n < 2:
        sys.exit("needs two GPUs or more")

    data = "/tmp/scale_jpegs"
    subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {args.peers!r}); import gen_jpegs; "
                    f"gen_jpegs.generate({data!r}, {args.images})"], check=True, timeout=600)
    manifest = "/tmp/elastic.stoker"
    subprocess.run([os.path.join(args.bundle, "bin", "stoker"), "index", os.path.join(data, "train"), "-o", manifest],
                   env=resnet_headline.server_env(args), check=True, timeout=300, stdout=subprocess.DEVNULL)
    env = dict(resnet_headline.trainer_env(args), CUDA_VISIBLE_DEVICES=",".join(str(g) for g in range(n)))

    synthetic = {}
    for ranks in (n, n - 1):
        args.seconds = args.synthetic_seconds
        runs = scale_bench.run_synthetic(args, args.arch, ranks, set(range(args.trainer_cores * ranks)), env)
        args.seconds = 0
        synthetic[ranks] = sum(r["images_per_second"] for r in runs)

    coordinator_core = args.trainer_cores * n
    first = coordinator_core + 1
    cluster = resnet_headline.start_cluster(args, manifest, os.path.join(args.logs, "cluster"), args.workers, True,
                                            {coordinator_core}, [{first + i} for i in range(args.workers)])
    stages, logs = [], []
    shapes = [n, n - 1, n]
    measured = [int(x) for x in args.steps.split(",")] + [0]
    try:
        cenv = dict(env, **cluster.client_env)
        for i, (ranks, steps) in enumerate(zip(shapes, measured)):
            pattern = os.path.join(args.logs, f"run{i}-{{rank}}.json")
            log_pattern = os.path.join(args.logs, f"run{i}-{{rank}}.log")
            extra = [f"--coordinator={cluster.endpoint}", "--job=elastic", f"--manifest={manifest}",
                     f"--epochs={args.epochs}", f"--prefetch={2 * args.workers // ranks + 4}", f"--json={pattern}",
                     f"--delivery-log={log_pattern}", f"--steps={steps}"]
            if i > 0:
                extra.append(f"--resume-state={os.path.join(args.logs, f'state{i - 1}.pkl')}")
            if steps:
                extra.append(f"--save-state={os.path.join(args.logs, f'state{i}.pkl')}")
            cmd = stage_cmd(args, ranks, extra)
            log(f"run {i}: {ranks} GPU(s): " + " ".join(cmd[1:]))
            rc, cpu = resnet_headline.run_profiled(cmd, cenv, args.timeout, set(range(args.trainer_cores * ranks)))
            if rc != 0:
                sys.exit(f"run {i} exited with {rc}: logs in {args.logs}")
            ranks_out = scale_bench.summaries(pattern, ranks)
            rate = sum(r["images_per_second"] for r in ranks_out)
            stages.append({"gpus": ranks, "img_s": rate, "vs_synthetic": rate / synthetic[ranks],
                           "synthetic_img_s": synthetic[ranks], "measured_steps": ranks_out[0]["measured_steps"],
                           "gpu_stall": [r["gpu_input_stall_fraction"] for r in ranks_out], "ranks": ranks_out})
            logs += [log_pattern.replace("{rank}", str(r)) for r in range(ranks)]
            log(f"run {i}: {ranks} GPU(s) {rate:,.0f} img/s = {rate / synthetic[ranks]:.3f} x synthetic "
                f"({synthetic[ranks]:,.0f})")
    finally:
        cluster.stop()
    check = subprocess.run([os.path.join(args.bundle, "bin", "stoker"), "check", f"--manifest={manifest}",
                            f"--ranks={n}", f"--batch-size={args.batch_size}", f"--epochs={args.epochs}", "--seed=1",
                            *logs], env=resnet_headline.server_env(args), capture_output=True, text=True, timeout=300)
    print(check.stdout + check.stderr)
    states = []
    for i in range(2):
        with open(os.path.join(args.logs, f"state{i}.pkl"), "rb") as f:
            s = pickle.load(f)
        states.append({k: s.get(k) for k in ("epoch", "offset", "ranks", "batch_size", "position")})
    result = {"arch": args.arch, "gpus": n, "workers": args.workers, "device": stages[0]["ranks"][0]["device"],
              "images": args.images, "epochs": args.epochs, "batch_size": args.batch_size, "stages": stages,
              "states": states, "check_exit": check.returncode, "check": check.stdout}
    with open(os.path.join(args.out, "elastic.json"), "w") as f:
        json.dump(result, f, indent=1)
    if check.returncode != 0:
        sys.exit("stoker check: not exact")


if __name__ == "__main__":
    main()
