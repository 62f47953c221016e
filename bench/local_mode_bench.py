#!/usr/bin/env python3
"""Local mode on one GPU box: a model trained on one GPU, fed three ways in one run, each with the same cores for its
input —
(c) synthetic GPU-resident input (the model's demand: examples/train_resnet50.py --synthetic),
(a) a PyTorch DataLoader with --workers worker processes over the same JPEGs (ImageFolder, RandomResizedCrop(224),
    horizontal flip, pin_memory: the pipeline of the peers' shared/bench/anchor_resnet.py, with the model and worker
    count of this run), and
(b) stoker.Loader("local", ..., local_workers=--workers) in examples/train_resnet50.py: a coordinator and that many
    single-thread workers started by the Loader itself, the ImageFolder folder indexed by it once.
Every run uses bfloat16 autocast, channels_last, batch 256 and 2 PyTorch intra-op threads, and is measured over
--seconds after 20 warm-up steps. Prints and writes OUT/local_mode.json: images/s of each, (a)/(c) and (b)/(c).

    python3 bench/local_mode_bench.py --bundle .bundle --peers .bundle/peers --archs resnet18,resnet50 --workers 14

Needs: .bundle from scripts/bundle-gpu.sh (its servers find their libraries by RPATH), PyTorch and torchvision.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def dataloader_run(args):
    """(a), in its own process: the DataLoader feeding the model; prints one JSON line."""
    import torch
    import torchvision
    from torchvision import transforms as T
    from torchvision.datasets import ImageFolder
    torch.set_num_threads(2)
    torch.backends.cudnn.benchmark = True
    model = getattr(torchvision.models, args.arch)(num_classes=1000).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    mean = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 3, 1, 1) * 255
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()])
    data = torch.utils.data.DataLoader(ImageFolder(args.images, transform=tf), batch_size=256, shuffle=True,
                                       num_workers=args.workers, pin_memory=True, persistent_workers=True,
                                       prefetch_factor=4, drop_last=True)
    steps = images = 0
    t0 = None
    while True:
        for x, y in data:
            if t0 is None and steps == 20:
                torch.cuda.synchronize()
                t0, images = time.perf_counter(), 0
            x = ((x.cuda(non_blocking=True).float() - mean) / std).contiguous(memory_format=torch.channels_last)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x), y.cuda(non_blocking=True))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
            if t0 is not None:
                images += 256
                if time.perf_counter() - t0 >= args.seconds:
                    torch.cuda.synchronize()
                    elapsed = time.perf_counter() - t0
                    print(json.dumps({"images_per_second": images / elapsed, "measured_seconds": elapsed}))
                    return


def train(args, arch, extra, name, env=None, cores=None):
    """examples/train_resnet50.py with `extra` (in `env`, pinned to `cores` when given); returns its summary."""
    out = os.path.join(args.out, f"{name}-{arch}.json")
    cmd = [sys.executable, os.path.join(args.examples, "train_resnet50.py"), "--arch", arch, "--batch-size", "256",
           "--seconds", str(args.seconds), "--json", out, "--print-every", "50", *extra]
    env = env or dict(os.environ, PYTHONPATH=os.path.join(args.bundle, "python"),
                      STOKER_BIN_DIR=os.path.join(args.bundle, "bin"))
    log(f"{name} {arch}: {' '.join(cmd[2:])}")
    r = subprocess.run(cmd, env=env, timeout=args.seconds + 600,
                       preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None)
    if r.returncode != 0:
        raise SystemExit(f"{name} {arch} failed ({r.returncode})")
    with open(out) as f:
        return json.load(f)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bundle", default=".bundle")
    p.add_argument("--peers", default=".bundle/peers", help="shared/bench (gen_jpegs.py)")
    p.add_argument("--examples", default=None, help="examples/ (default: the bundle's)")
    p.add_argument("--images", default="/tmp/anchor_jpegs/train", help="an ImageFolder tree (made if missing)")
    p.add_argument("--count", type=int, default=8000, help="images to generate if --images is missing")
    p.add_argument("--archs", default="resnet18,resnet50")
    p.add_argument("--workers", type=int, default=14, help="input processes for (a) and (b)")
    p.add_argument("--seconds", type=float, default=40)
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    p.add_argument("--dataloader-run", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--arch", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.dataloader_run:
        return dataloader_run(args)
    args.examples = args.examples or os.path.join(args.bundle, "examples")
    if not os.path.isdir(args.images):
        sys.path.insert(0, args.peers)
        from gen_jpegs import generate
        log(f"generating {args.count} JPEGs under {os.path.dirname(args.images)}")
        generate(os.path.dirname(args.images), args.count)
    results = {"workers": args.workers, "seconds": args.seconds, "cores": os.cpu_count(), "runs": {}}
    for arch in args.archs.split(","):
        synthetic = train(args, arch, ["--synthetic"], "synthetic")["images_per_second"]
        local = train(args, arch, ["--coordinator", "local", "--local-workers", str(args.workers), "--manifest",
                                   args.images, "--epochs", "1000"], "local")
        log(f"dataloader {arch}: {args.workers} workers")
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--dataloader-run", "--arch", arch,
                            "--images", args.images, "--workers", str(args.workers), "--seconds", str(args.seconds)],
                           capture_output=True, text=True, timeout=args.seconds + 600)
        if r.returncode != 0:
            raise SystemExit(f"dataloader {arch} failed:\n{r.stderr[-3000:]}")
        loader = json.loads(r.stdout.strip().splitlines()[-1])["images_per_second"]
        results["runs"][arch] = {
            "synthetic_img_s": synthetic, "local_img_s": local["images_per_second"], "dataloader_img_s": loader,
            "local_vs_synthetic": local["images_per_second"] / synthetic, "dataloader_vs_synthetic": loader / synthetic,
            "local_gpu_stall": local["gpu_input_stall_fraction"],
            "local_host_wait": local["host_input_wait_fraction"], "local_trainer_cores": local["trainer_cores"],
            "device": local["device"]}
        log(f"{arch}: synthetic {synthetic:,.0f} img/s; stoker local {local['images_per_second']:,.0f} "
            f"({local['images_per_second'] / synthetic:.3f}x); DataLoader {loader:,.0f} ({loader / synthetic:.3f}x)")
    with open(os.path.join(args.out, "local_mode.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
