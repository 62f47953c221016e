#!/usr/bin/env python3
"""ResNet-50 training fed by stoker: torchvision's ResNet-50 (or another, --arch) in bfloat16 autocast and
channels_last, its batches from stoker workers, normalised on the GPU by the stoker Loader (bfloat16, NHWC). Prints
images/s and how long the training loop waited for input: the host's wait in the Loader, and the GPU's input stall
(the time the GPU sat idle because no batch was there, measured with CUDA events on the training stream).
--synthetic trains the same model on one GPU-resident batch instead: the model's demand, to compare against.

Needs a running coordinator and workers (a Kubernetes deployment, or locally `stoker-coordinator` and
`stoker-worker` processes; bench/resnet_headline.py starts them for you), or --coordinator local, which starts them
beside the trainer (--local-workers; --manifest may then be an ImageFolder or tar-shard folder):

    PYTHONPATH=build/python python3 examples/train_resnet50.py --coordinator tcp://127.0.0.1:7400 \
        --manifest /data/train.stoker --batch-size 256 --epochs 1

With torchrun, each process takes its rank from RANK / WORLD_SIZE / LOCAL_RANK and the model is wrapped in
DistributedDataParallel (NCCL); --json's {rank} is replaced by the rank. Labels of quarantined samples are
-1 and padding samples are masked the same way: the loss ignores both.
"""
import argparse
import json
import os
import pickle
import sys
import time

import numpy as np
import torch
import torchvision

try:
    import stoker
except ImportError:  # run from a source tree: use the build's package
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "python"))
    import stoker


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--coordinator", default=os.environ.get("STOKER_COORDINATOR"),
                   help="control endpoint, or 'local': start a coordinator and workers on this machine")
    p.add_argument("--local-workers", default="auto",
                   help="with --coordinator local: worker processes (or auto); with a cluster's coordinator: "
                        "node-local workers beside its pool (auto: none)")
    p.add_argument("--job", default="resnet50", help="stoker job name")
    p.add_argument("--manifest", help="dataset manifest (stoker index); omit with --attach")
    p.add_argument("--attach", action="store_true", help="join a job another process created")
    p.add_argument("--batch-size", type=int, default=256, help="per rank")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="stop after this many measured steps (0: all epochs)")
    p.add_argument("--warmup", type=int, default=20, help="steps before measuring (cuDNN autotuning, allocator)")
    p.add_argument("--arch", default="resnet50", help="a torchvision.models constructor (resnet18, resnet50, ...)")
    p.add_argument("--synthetic", action="store_true",
                   help="no stoker: train on one random GPU-resident batch (the model's demand, for a ratio)")
    p.add_argument("--seconds", type=float, default=0, help="stop after this many measured seconds (0: no limit)")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--depth", type=int, default=4, help="batches per GPU in pinned and device memory")
    p.add_argument("--prefetch", type=int, default=8, help="batches workers may send ahead")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=300, help="seconds one batch may take")
    p.add_argument("--print-every", type=int, default=50, help="steps between progress lines")
    p.add_argument("--json", help="write the summary here")
    p.add_argument("--cpu-threads", type=int, default=2,
                   help="PyTorch's intra-op CPU threads (0: PyTorch's default, one per core). With its input made "
                        "elsewhere the trainer's CPU work is launching kernels; a thread per core only competes "
                        "with the workers sharing the node")
    p.add_argument("--rank-cores", type=int, default=0,
                   help="pin each process to cores of its own: LOCAL_RANK x N to LOCAL_RANK x N + N - 1, offset by "
                        "--first-core (0: leave placement to the scheduler). Under torchrun the ranks otherwise "
                        "share every core the launcher had")
    p.add_argument("--first-core", type=int, default=0)
    p.add_argument("--resume-state", help="a loader state (pickle of Loader.state_dict()) to resume from: on this "
                                          "number of GPUs and batch size or others")
    p.add_argument("--save-state", help="write rank 0's loader state here (pickle) when the run stops")
    p.add_argument("--delivery-log", help="each rank's delivery log ({rank}: the rank), for `stoker check`")
    return p.parse_args()


def local_workers(args):
    """The Loader's local_workers: local mode's count, or node-local workers beside a cluster's pool (none: auto)."""
    if args.coordinator == "local":
        return dict(local_workers=args.local_workers)
    return {} if args.local_workers in ("auto", "0") else dict(local_workers=int(args.local_workers))


class SyntheticLoader:
    """One random batch, already on the GPU and in the Loader's format, served forever: what the model would do if
    input cost nothing. The same interface as stoker.Loader as far as this script uses it."""

    def __init__(self, batch_size, classes, device):
        self.images = torch.randn(batch_size, 3, 224, 224, device=device, dtype=torch.bfloat16) \
            .contiguous(memory_format=torch.channels_last)
        self.labels = torch.randint(0, classes, (batch_size,), device=device)
        self.padding = np.zeros(batch_size, dtype=bool)
        self.finished = self.stopped = False

    def batches(self):  # one endless epoch: --steps or --seconds ends it
        while True:
            yield self

    def stats(self):
        return {"input_stall_seconds": 0.0}

    def close(self):
        pass


def main():
    args = parse_args()
    if not args.synthetic and not args.coordinator:
        sys.exit("--coordinator (or STOKER_COORDINATOR) is required")
    if args.synthetic and not (args.steps or args.seconds):
        sys.exit("--synthetic needs --steps or --seconds: its input never ends")
    if not torch.cuda.is_available():
        sys.exit("this example trains on a GPU; none is visible")
    if args.cpu_threads > 0:
        torch.set_num_threads(args.cpu_threads)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    device = int(os.environ.get("LOCAL_RANK", 0))
    if args.rank_cores > 0:
        first = args.first_core + device * args.rank_cores
        os.sched_setaffinity(0, range(first, first + args.rank_cores))
    torch.cuda.set_device(device)
    torch.backends.cudnn.benchmark = True

    model = getattr(torchvision.models, args.arch)(num_classes=args.classes).cuda() \
        .to(memory_format=torch.channels_last)
    if world > 1:
        torch.distributed.init_process_group("nccl", device_id=torch.device("cuda", device))
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device])
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)

    if args.synthetic:
        loader = SyntheticLoader(args.batch_size, args.classes, device)
    else:
        spec = dict(attach=True) if args.attach else dict(manifest=args.manifest, ranks=world, epochs=args.epochs,
                                                          seed=args.seed)
        loader = stoker.Loader(args.coordinator, args.job, batch_size=args.batch_size, rank=rank, device=device,
                               dtype="bfloat16", layout="nhwc", depth=args.depth, prefetch=args.prefetch,
                               timeout=args.timeout, delivery_log=args.delivery_log, **spec,
                               **local_workers(args))
        if args.resume_state:
            with open(args.resume_state, "rb") as f:
                loader.load_state_dict(pickle.load(f))

    def step(images, labels):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(images), labels, ignore_index=-1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    steps = images_seen = 0
    host_wait = 0.0
    waits = []  # each measured step's wait for its batch: how smooth delivery is, not only how fast
    measuring = False
    t0 = stall0 = 0.0
    loss = None
    done = False
    for epoch in range(args.epochs):
        it = loader.batches()
        while True:
            t = time.perf_counter()
            batch = next(it, None)
            waited = time.perf_counter() - t
            if batch is None:
                break
            if measuring:
                host_wait += waited
                waits.append(waited)
            labels = batch.labels.masked_fill(torch.from_numpy(batch.padding).to(batch.labels.device), -1) \
                if batch.padding.any() else batch.labels
            loss = step(batch.images, labels)
            del batch, labels
            steps += 1
            if steps == args.warmup:  # start the clock with the GPU drained
                torch.cuda.synchronize()
                measuring, t0, stall0 = True, time.perf_counter(), loader.stats()["input_stall_seconds"]
                cpu0 = time.process_time()
                steps_at_start = steps
            elif measuring:
                images_seen += args.batch_size
            if measuring and steps % args.print_every == 0:
                elapsed = time.perf_counter() - t0
                stall = loader.stats()["input_stall_seconds"] - stall0
                print(f"epoch {epoch} step {steps}: {images_seen / elapsed:,.0f} img/s, waiting for input "
                      f"{100 * host_wait / elapsed:.1f} % (host) {100 * stall / elapsed:.1f} % (GPU stall), "
                      f"loss {loss.item():.3f}", flush=True)
                if args.seconds and elapsed >= args.seconds:
                    done = True
                    break
            if args.steps and measuring and steps - steps_at_start >= args.steps:
                done = True
                break
        if done or loader.finished or loader.stopped:
            break
    torch.cuda.synchronize()
    if not measuring:
        sys.exit(f"only {steps} steps: fewer than --warmup {args.warmup}; nothing measured")
    elapsed = time.perf_counter() - t0
    stats = loader.stats()
    if args.save_state and rank == 0:  # every rank stopped after the same step: rank 0's state resumes them all
        with open(args.save_state + ".tmp", "wb") as f:
            pickle.dump(loader.state_dict(), f)
        os.replace(args.save_state + ".tmp", args.save_state)
    summary = {
        "arch": args.arch,
        "synthetic": args.synthetic,
        "rank": rank,
        "world_size": world,
        "images_per_second": images_seen / elapsed,
        "measured_steps": steps - steps_at_start,
        "measured_seconds": elapsed,
        "batch_size": args.batch_size,
        "host_input_wait_fraction": host_wait / elapsed,
        "host_wait_ms": {q: 1000 * float(np.percentile(waits, p)) if waits else 0.0
                         for q, p in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100))},
        "gpu_input_stall_fraction": (stats["input_stall_seconds"] - stall0) / elapsed,
        "trainer_cores": (time.process_time() - cpu0) / elapsed,  # this process's threads, beside the stall
        "final_loss": float(loss.item()),
        "loader": stats,
        "device": torch.cuda.get_device_name(device),
    }
    loader.close()
    print(f"{args.arch} fed by {'synthetic input' if args.synthetic else 'stoker'}"
          f"{f' (rank {rank} of {world})' if world > 1 else ''}: {summary['images_per_second']:,.0f} img/s over "
          f"{summary['measured_steps']} steps, waiting for input {100 * summary['host_input_wait_fraction']:.1f} % "
          f"(host), GPU input stall {100 * summary['gpu_input_stall_fraction']:.1f} %", flush=True)
    if args.json:
        with open(args.json.replace("{rank}", str(rank)), "w") as f:
            json.dump(summary, f, indent=1)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
