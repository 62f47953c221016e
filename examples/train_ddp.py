#!/usr/bin/env python3
"""Data-parallel training with torchrun and DistributedDataParallel, fed by stoker: every process opens the same
stoker.Loader and takes its rank and the world size from torch.distributed (torchrun's RANK and WORLD_SIZE); the
job is created by the first rank to connect. Checkpoints hold the model, the optimiser and rank 0's loader state;
every rank resumes from it at the same position, since ranks step together.

    torchrun --nproc-per-node 2 examples/train_ddp.py --coordinator tcp://127.0.0.1:7400 --manifest data.stoker \
        --epochs 2 --checkpoint-dir ckpt --checkpoint-every 100
    torchrun --nproc-per-node 2 examples/train_ddp.py ... --resume ckpt/step=100.ckpt      # after a crash
    torchrun --nproc-per-node 3 examples/train_ddp.py ... --resume ckpt/step=100.ckpt      # on another shape

With a GPU per rank: NCCL, each rank on its LOCAL_RANK device; otherwise gloo on the CPU. Quarantined samples have
label -1, which the loss ignores.
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
import torchvision
from torch.nn.parallel import DistributedDataParallel

import stoker  # pip install stoker-*.whl, or PYTHONPATH=build/python


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--coordinator", default=os.environ.get("STOKER_COORDINATOR"), help="control endpoint")
    p.add_argument("--job", default="ddp", help="stoker job name")
    p.add_argument("--manifest", required=True, help="dataset manifest (stoker index)")
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--model", default="resnet18", help="a torchvision.models constructor")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--checkpoint-dir", help="save step=N.ckpt here every --checkpoint-every steps")
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--resume", help="a checkpoint to resume from")
    p.add_argument("--max-steps", type=int, default=-1, help="stop after this many steps of this run (-1: the job)")
    p.add_argument("--delivery-log", help="each rank's delivery log ({rank}: the rank), for `stoker check`")
    p.add_argument("--summary", help="each rank's summary as JSON ({rank} is replaced)")
    return p.parse_args()


def main():
    args = parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    # NCCL needs a GPU per rank; with fewer, this trains on the CPU over gloo.
    cuda = torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    loader = stoker.Loader(args.coordinator, args.job, manifest=args.manifest, batch_size=args.batch_size,
                           epochs=args.epochs, seed=args.seed, image_height=args.image_size,
                           image_width=args.image_size, device=local_rank if cuda else -1,
                           delivery_log=args.delivery_log)
    model = getattr(torchvision.models, args.model)(num_classes=args.classes).to("cuda" if cuda else "cpu")
    model = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if args.resume:
        checkpoint = torch.load(args.resume, map_location="cpu")
        model.module.load_state_dict(checkpoint["model"])
        opt.load_state_dict(checkpoint["optimizer"])
        loader.load_state_dict(checkpoint["loader"])  # rank 0's: this rank resumes at the same position

    start = loader.state_dict()["position"]  # the first batch of this run, in this shape's numbering
    steps, per_epoch = 0, {}
    while not (loader.finished or loader.stopped) and steps != args.max_steps:
        for images, labels in loader:  # one epoch (after a resume, the rest of it)
            loss = torch.nn.functional.cross_entropy(model(images), labels, ignore_index=-1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
            per_epoch[loader.epoch] = per_epoch.get(loader.epoch, 0) + 1
            if args.checkpoint_every and (start + steps) % args.checkpoint_every == 0:
                save(args, model, opt, loader, rank)
            if steps == args.max_steps:
                break

    if args.summary:
        weights = sum(p.detach().double().sum().item() for p in model.parameters())
        with open(args.summary.format(rank=rank), "w") as f:
            json.dump({"rank": rank, "world_size": dist.get_world_size(), "len": len(loader), "steps": steps,
                       "steps_per_epoch": per_epoch, "weights_sum": weights, "loss": loss.item() if steps else None,
                       "position": loader.state_dict()["position"]}, f)
    loader.close()
    dist.destroy_process_group()


def save(args, model, opt, loader, rank):
    state = {"model": model.module.state_dict(), "optimizer": opt.state_dict(), "loader": loader.state_dict()}
    if rank == 0:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        path = os.path.join(args.checkpoint_dir, f"step={state['loader']['position']}.ckpt")
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)  # whole or absent, whenever the job is killed
    dist.barrier()  # no rank goes on before the checkpoint is whole


if __name__ == "__main__":
    main()
