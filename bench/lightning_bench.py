#!/usr/bin/env python3
"""Lightning on the GPU machine: examples/train_lightning.py (ResNet-50, bf16 mixed precision, channels_last) with
the stoker.Loader as its train dataloader — a coordinator and N single-thread workers on this machine's cores —
against the same model and Trainer on synthetic GPU-resident input, in one run; and the stoker run stopped after a
mid-epoch checkpoint (the steps after it lost, as in a crash) and resumed through Lightning's own checkpointing
(Trainer.fit(ckpt_path=...)), proven exact by `stoker check` on the delivery logs cut at the checkpoint.

    python3 bench/lightning_bench.py --bundle .bundle --out $OUT

Needs: .bundle from scripts/bundle-gpu.sh (bin/ and lib/ for the servers, python/ the package, examples/, tests/
for the shared test support), PyTorch, torchvision and Lightning. Writes OUT/lightning.json.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", default=os.path.join(ROOT, ".bundle"))
    p.add_argument("--workers", type=int, default=14, help="worker processes, one thread each")
    p.add_argument("--images", type=int, default=8192, help="generated JPEGs")
    p.add_argument("--model", default="resnet50", help="a torchvision.models constructor")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--checkpoint-at", type=int, default=120, help="the global step of the mid-epoch checkpoint")
    p.add_argument("--stop-at", type=int, default=130, help="where the first run stops (its later steps are lost)")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--timeout", type=int, default=400, help="seconds per training run")
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/stoker-out"))
    p.add_argument("--work", default="/tmp/stoker-lightning")
    args = p.parse_args()
    sys.path[:0] = [os.path.join(args.bundle, "tests"), os.path.join(args.bundle, "python")]
    import support  # python/tests/support.py: the cluster and the checker the tests use

    steps_per_epoch = args.images // args.batch_size
    if args.checkpoint_at % steps_per_epoch == 0 or args.stop_at <= args.checkpoint_at:
        sys.exit("--checkpoint-at must fall mid-epoch and before --stop-at")
    os.makedirs(args.work, exist_ok=True)
    server_env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(args.bundle, "lib"))
    trainer_env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}  # PyTorch keeps its libraries
    trainer_env.update(PYTHONPATH=os.path.join(args.bundle, "python"), PYTHONUNBUFFERED="1")
    example = [sys.executable, os.path.join(args.bundle, "examples", "train_lightning.py")]
    common = [f"--model={args.model}", f"--image-size={args.image_size}", f"--batch-size={args.batch_size}",
              f"--warmup={args.warmup}"]

    log(f"synthetic input: {args.stop_at} steps")
    synthetic_json = os.path.join(args.work, "synthetic.json")
    subprocess.run(example + common + ["--synthetic", f"--synthetic-steps={args.stop_at}", "--epochs=1",
                                       f"--summary={synthetic_json}"], env=trainer_env, check=True,
                   timeout=args.timeout)
    with open(synthetic_json) as f:
        synthetic = json.load(f)

    log(f"stoker: {args.images} images, {args.workers} workers; stop at step {args.stop_at}, resume from "
        f"{args.checkpoint_at}")
    cluster = support.Cluster(os.path.join(args.bundle, "bin"), args.images, workers=args.workers,
                              server_env=server_env, work=os.path.join(args.work, "cluster"))
    trainer_env = dict(trainer_env, **cluster.client_env)  # the cluster's client key and trust file (CURVE)
    try:
        job = [f"--coordinator={cluster.endpoint}", "--job=lightning", f"--manifest={cluster.manifest}",
               f"--epochs={args.epochs}", "--seed=1", f"--prefetch={2 * args.workers + 4}"]
        result = support.train_and_resume(cluster, example, common + job, 1, args.checkpoint_at, args.stop_at,
                                          args.work, env=trainer_env, timeout=args.timeout,
                                          batch_size=args.batch_size, epochs=args.epochs, seed=1)
    finally:
        cluster.stop()
    first, second = result["first"][0], result["second"][0]
    rate = synthetic["images_per_second"]
    summary = {
        "model": args.model, "image_size": args.image_size,
        "device": synthetic["device"], "lightning": synthetic["lightning"], "torch": synthetic["torch"],
        "cores": os.cpu_count(), "workers": args.workers, "batch_size": args.batch_size,
        "synthetic_img_s": rate,
        "stoker_img_s": first["images_per_second"], "stoker_vs_synthetic": first["images_per_second"] / rate,
        "resumed_img_s": second["images_per_second"],
        "first_run_steps": first["steps"], "resumed_from_step": result["state"]["position"],
        "resumed_epoch": result["state"]["epoch"], "resumed_batches_in_epoch": result["state"]["batches_in_epoch"],
        "resumed_run_steps": second["steps"], "planned_steps": args.epochs * steps_per_epoch,
        "resumed_run_global_step": second["global_step"], "check": result["check"].strip().splitlines(),
        "first_run_loader": first["loader"],
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "lightning.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print()
    print(f"Lightning {summary['lightning']}, {args.model}, batch {args.batch_size}, {summary['device']}, "
          f"{args.workers} workers x 1 thread")
    print(f"  synthetic input              {rate:8.0f} img/s")
    print(f"  stoker (steps {args.warmup}..{args.stop_at})        {first['images_per_second']:8.0f} img/s  "
          f"{summary['stoker_vs_synthetic']:.3f} x synthetic")
    print(f"  resumed at step {args.checkpoint_at} (epoch {summary['resumed_epoch']}, batch "
          f"{summary['resumed_batches_in_epoch']}): {second['steps']} more steps of "
          f"{summary['planned_steps'] - args.checkpoint_at} planned, {summary['resumed_img_s'] or 0:.0f} img/s")
    print("  stoker check (first run cut at the checkpoint + resumed run):")
    print("    " + "\n    ".join(summary["check"]))


if __name__ == "__main__":
    main()
