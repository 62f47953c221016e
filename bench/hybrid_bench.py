#!/usr/bin/env python3
"""Node-local workers beside a pool, on one GPU: a model trained on one GPU of a multi-core machine, fed in one run
(c) by synthetic GPU-resident input (its demand: examples/train_resnet50.py --synthetic), then by a CURVE cluster
(support.Cluster: a coordinator and single-thread pool workers, each pinned to a core of its own, batches sealed
over TCP: the "remote" pool) in three ways with the same number of worker cores:
(r) the pool alone (--pool + --local workers),
(h) hybrid: --pool pool workers and --local node-local workers the trainer starts (local_workers), served first,
    their batches over ipc:// unsealed,
(l) node-local workers alone (--pool + --local of them, the pool idle beside them).
The trainer is pinned to --trainer-cores cores (PyTorch's threads) plus its node-local workers' cores, which they
inherit. Prints and writes OUT/hybrid.json: images/s of each and against (c), and the trainer process's own cores
(its threads: the Loader's I/O and openers, not its workers) per 20,000 img/s, for sealed remote batches against
unsealed local ones.

    python3 bench/hybrid_bench.py --bundle .bundle --peers .bundle/peers --arch resnet18 --pool 24 --local 8

Needs: .bundle from scripts/bundle-gpu.sh, PyTorch and torchvision, --trainer-cores + --pool + --local + 1 cores.
"""
import argparse
import json
import os
import subprocess
import sys

from local_mode_bench import log, train as train_model


def train(args, name, extra, env, cores):
    """examples/train_resnet50.py with `extra`, its PyTorch threads --trainer-cores, pinned to `cores`."""
    return train_model(args, args.arch, [f"--cpu-threads={args.trainer_cores}", *extra], f"hybrid-{name}", env, cores)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bundle", default=".bundle")
    p.add_argument("--peers", default=".bundle/peers", help="shared/bench (gen_jpegs.py)")
    p.add_argument("--images", default="/tmp/anchor_jpegs/train", help="an ImageFolder tree (made if missing)")
    p.add_argument("--count", type=int, default=8000, help="images to generate if --images is missing")
    p.add_argument("--arch", default="resnet18")
    p.add_argument("--pool", type=int, default=24, help="pool workers in the hybrid run")
    p.add_argument("--local", type=int, default=8, help="node-local workers in the hybrid run")
    p.add_argument("--trainer-cores", type=int, default=2)
    p.add_argument("--seconds", type=float, default=40)
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    args = p.parse_args()
    args.examples = os.path.join(args.bundle, "examples")
    sys.path[:0] = [os.path.join(args.bundle, "tests"), os.path.join(args.bundle, "python")]
    import support  # python/tests/support.py (the bundle's tests/)
    total = args.pool + args.local
    if args.trainer_cores + total + 1 > os.cpu_count():
        raise SystemExit(f"needs {args.trainer_cores + total + 1} cores, this machine has {os.cpu_count()}")
    if not os.path.isdir(args.images):
        sys.path.insert(0, args.peers)
        from gen_jpegs import generate
        log(f"generating {args.count} JPEGs under {os.path.dirname(args.images)}")
        generate(os.path.dirname(args.images), args.count)
    server_env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(args.bundle, "lib"))
    manifest = "/tmp/hybrid.stoker"
    subprocess.run([os.path.join(args.bundle, "bin", "stoker"), "index", args.images, "-o", manifest],
                   env=server_env, check=True, timeout=300, stdout=subprocess.DEVNULL)
    trainer = set(range(args.trainer_cores))
    coordinator = {args.trainer_cores + total}
    results = {"arch": args.arch, "cores": os.cpu_count(), "pool": args.pool, "local": args.local,
               "trainer_cores": args.trainer_cores, "seconds": args.seconds, "runs": {}}
    base_env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    base_env.update(PYTHONPATH=os.path.join(args.bundle, "python"), PYTHONUNBUFFERED="1",
                    STOKER_BIN_DIR=os.path.join(args.bundle, "bin"))
    synthetic = train(args, "synthetic", ["--synthetic"], base_env, trainer)["images_per_second"]
    results["synthetic_img_s"] = synthetic
    # (pool workers, node-local workers): the local ones take the cores right after the trainer's, the pool's the rest
    for name, pool, local in (("remote", total, 0), ("hybrid", args.pool, args.local), ("local", 0, total)):
        local_cores = set(range(args.trainer_cores, args.trainer_cores + local))
        pool_cores = [{args.trainer_cores + local + i} for i in range(pool)]
        cluster = support.Cluster(os.path.join(args.bundle, "bin"), None, workers=pool, manifest=manifest,
                                  server_env=server_env, work=f"/tmp/hybrid-{name}", keep=True,
                                  coordinator_flags=["--log-level=warning"], worker_flags=["--log-level=warning"],
                                  coordinator_cores=coordinator, worker_cores=pool_cores)
        try:
            env = dict(base_env, **cluster.client_env)
            r = train(args, name, [f"--coordinator={cluster.endpoint}", f"--job=hybrid-{name}",
                                   f"--manifest={manifest}", "--epochs=1000", f"--prefetch={2 * pool + 4}",
                                   f"--local-workers={local}"], env, trainer | local_cores)
            state = cluster.state() or {}
        finally:
            cluster.stop()
        img_s = r["images_per_second"]
        results["runs"][name] = {
            "pool_workers": pool, "local_workers": local, "img_s": img_s, "vs_synthetic": img_s / synthetic,
            "gpu_stall": r["gpu_input_stall_fraction"], "host_wait": r["host_input_wait_fraction"],
            "trainer_cores": r["trainer_cores"], "trainer_cores_per_20k": r["trainer_cores"] / img_s * 20000,
            "connected_workers": r["loader"]["connected_workers"], "device": r["device"],
            "leases_by_worker": [{"local": w.get("local"), "leases_granted": w.get("leases_granted")}
                                 for w in state.get("workers", [])]}
        log(f"{name}: {img_s:,.0f} img/s ({img_s / synthetic:.3f}x of {synthetic:,.0f}); trainer "
            f"{r['trainer_cores']:.2f} cores = {r['trainer_cores'] / img_s * 20000:.2f} per 20k img/s")
    with open(os.path.join(args.out, "hybrid.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
