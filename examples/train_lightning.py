#!/usr/bin/env python3
"""A LightningModule trained on stoker batches: the stoker.Loader goes to Trainer.fit as the train dataloader.
Lightning asks len(loader) for the steps per epoch, saves loader.state_dict() in its checkpoints and hands it to
loader.load_state_dict() when fit resumes from one (ckpt_path), so a mid-epoch checkpoint resumes exactly the
batches not yet trained on. With several devices Lightning runs one process per device; each opens the same Loader
and takes its rank from torch.distributed when it connects (at fit's first len()).

    python3 examples/train_lightning.py --coordinator tcp://127.0.0.1:7400 --manifest data.stoker --epochs 2 \
        --checkpoint-dir ckpt --checkpoint-every 100
    python3 examples/train_lightning.py ... --resume ckpt/step=100.ckpt         # after a crash
    python3 examples/train_lightning.py ... --synthetic                        # the model's rate, no input cost

On a GPU: bfloat16 mixed precision, the Loader delivering bfloat16 channels_last; on the CPU: float32. Prints
images/s over the steps after --warmup; --summary writes it as JSON.
"""
import argparse
import json
import os
import time

import torch
import torchvision

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl

import stoker  # pip install stoker-*.whl, or PYTHONPATH=build/python


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--coordinator", default=os.environ.get("STOKER_COORDINATOR"), help="control endpoint")
    p.add_argument("--job", default="lightning", help="stoker job name")
    p.add_argument("--manifest", help="dataset manifest (stoker index)")
    p.add_argument("--batch-size", type=int, default=256, help="per device")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--model", default="resnet50", help="a torchvision.models constructor")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--devices", type=int, default=1, help="GPUs (one process each, DDP) or CPU processes")
    p.add_argument("--checkpoint-dir", help="save step=N.ckpt here every --checkpoint-every steps")
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--resume", help="a Lightning checkpoint to resume from")
    p.add_argument("--max-steps", type=int, default=-1, help="stop at this global step (-1: the job's end)")
    p.add_argument("--synthetic", action="store_true", help="random device-resident input instead of stoker")
    p.add_argument("--synthetic-steps", type=int, default=200, help="steps per epoch with --synthetic")
    p.add_argument("--warmup", type=int, default=20, help="steps before measuring")
    p.add_argument("--depth", type=int, default=4, help="batches per GPU in pinned and device memory")
    p.add_argument("--prefetch", type=int, default=8, help="batches workers may send ahead")
    p.add_argument("--delivery-log", help="each rank's delivery log ({rank}: the rank), for `stoker check`")
    p.add_argument("--summary", help="each rank's summary as JSON ({rank} is replaced)")
    return p.parse_args()


class Classifier(pl.LightningModule):
    def __init__(self, model, classes, channels_last):
        super().__init__()
        self.model = getattr(torchvision.models, model)(num_classes=classes)
        if channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)

    def training_step(self, batch, batch_idx):
        images, labels = batch
        return torch.nn.functional.cross_entropy(self.model(images), labels, ignore_index=-1)  # -1: quarantined

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)


class Throughput(pl.Callback):
    """Steps and images/s of this run after `warmup` steps, the device drained at both ends of the measurement."""

    def __init__(self, warmup, batch_size):
        self.warmup, self.batch_size = warmup, batch_size
        self.steps, self.t0, self.seconds = 0, None, 0.0

    def _sync(self, module):
        if module.device.type == "cuda":
            torch.cuda.synchronize(module.device)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.steps += 1
        if self.steps == self.warmup:
            self._sync(module)
            self.t0 = time.perf_counter()

    def on_train_end(self, trainer, module):
        if self.t0 is not None:
            self._sync(module)
            self.seconds = time.perf_counter() - self.t0

    def images_per_second(self):
        measured = self.steps - self.warmup
        return measured * self.batch_size / self.seconds if self.seconds > 0 and measured > 0 else None


class Synthetic:
    """Device-resident random batches shaped as the Loader delivers them, `steps` per epoch: what the model does
    when input costs nothing."""

    def __init__(self, args, device, dtype, channels_last):
        self.steps = args.synthetic_steps
        shape = (args.batch_size, 3, args.image_size, args.image_size)
        self.images = torch.randn(shape, device=device).to(dtype)
        if channels_last:
            self.images = self.images.contiguous(memory_format=torch.channels_last)
        self.labels = torch.randint(0, args.classes, (args.batch_size,), device=device)

    def __len__(self):
        return self.steps

    def __iter__(self):
        return iter([(self.images, self.labels)] * self.steps)


def main():
    args = parse_args()
    gpu = torch.cuda.is_available()
    dtype, layout = ("bfloat16", "nhwc") if gpu else ("float32", "nchw")
    throughput = Throughput(args.warmup, args.batch_size)
    callbacks = [throughput]
    if args.checkpoint_every:
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=args.checkpoint_dir, filename="{step}", save_top_k=-1,
                                                      every_n_train_steps=args.checkpoint_every))
    trainer = pl.Trainer(accelerator="gpu" if gpu else "cpu", devices=args.devices,
                         strategy="ddp" if args.devices > 1 else "auto", precision="bf16-mixed" if gpu else "32-true",
                         max_epochs=args.epochs, max_steps=args.max_steps, callbacks=callbacks, logger=False,
                         enable_checkpointing=bool(args.checkpoint_every), enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0)
    module = Classifier(args.model, args.classes, channels_last=gpu)
    if args.synthetic:
        data = Synthetic(args, torch.device("cuda", torch.cuda.current_device()) if gpu else "cpu",
                         getattr(torch, dtype), channels_last=gpu)
    else:
        # Connects inside fit, once Lightning has started its processes and set each one's device.
        data = stoker.Loader(args.coordinator, args.job, manifest=args.manifest, batch_size=args.batch_size,
                             epochs=args.epochs, seed=args.seed, image_height=args.image_size,
                             image_width=args.image_size, dtype=dtype, layout=layout, depth=args.depth,
                             prefetch=args.prefetch, delivery_log=args.delivery_log)
    trainer.fit(module, train_dataloaders=data, ckpt_path=args.resume)

    rate = throughput.images_per_second()
    summary = {"rank": trainer.global_rank, "len": len(data), "steps": throughput.steps,
               "global_step": trainer.global_step, "images_per_second": rate,
               "measured_steps": max(0, throughput.steps - args.warmup), "batch_size": args.batch_size,
               "model": args.model, "lightning": pl.__version__, "torch": torch.__version__,
               "device": torch.cuda.get_device_name() if gpu else "cpu", "synthetic": args.synthetic}
    if not args.synthetic:
        summary["loader"] = data.stats()
        data.close()
    print(f"{args.model} on {'synthetic input' if args.synthetic else 'stoker'}: {throughput.steps} steps, "
          + (f"{rate:,.0f} img/s after {args.warmup} warm-up steps" if rate else "too few steps to measure"),
          flush=True)
    if args.summary:
        with open(args.summary.format(rank=trainer.global_rank), "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
