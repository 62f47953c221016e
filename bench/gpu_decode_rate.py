#!/usr/bin/env python3
"""The GPU's side of a job that decodes on the GPU, before stoker's own decoder exists: how fast the GPU decodes
what workers would send, each JPEG as its file (gpu_decode=file) against cut to its crop (gpu_decode=cut), measured
with torchvision's batched nvJPEG decode (torchvision.io.decode_jpeg on a list, device="cuda": the path a DALI or
torchvision user takes) on the same images in the same run. The JPEGs are those bench/cut_bench writes with
--dump-dir (DIR/file, DIR/cut: train's, as they go on the wire).

    python3 bench/gpu_decode_rate.py --dir /tmp/cutdump --batch 256 --seconds 10 --json OUT/gpu_decode_rate.json

Prints img/s and input MB/s for each, and cut / file. Needs PyTorch and torchvision with CUDA.
"""
import argparse
import glob
import json
import os
import time

import torch
import torchvision
from torchvision.io import ImageReadMode, decode_jpeg


def load(directory):
    paths = sorted(glob.glob(os.path.join(directory, "*.jpg")), key=lambda p: int(os.path.basename(p)[:-4]))
    return [torchvision.io.read_file(p) for p in paths]


def rate(blobs, batch, seconds):
    """Decoded images per second, batches of `batch` taken round the set, after one warm-up batch."""
    def batches():
        i = 0
        while True:
            yield [blobs[(i + k) % len(blobs)] for k in range(batch)]
            i = (i + batch) % len(blobs)

    it = batches()
    out = decode_jpeg(next(it), mode=ImageReadMode.RGB, device="cuda")
    torch.cuda.synchronize()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        out = decode_jpeg(next(it), mode=ImageReadMode.RGB, device="cuda")
        n += batch
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    pixels = sum(int(o.shape[1]) * int(o.shape[2]) for o in out) / len(out)
    return n / elapsed, pixels


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True, help="cut_bench --dump-dir's directory (file/ and cut/ in it)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, {torch.cuda.get_device_name(0)}")
    result = {"torchvision": torchvision.__version__, "gpu": torch.cuda.get_device_name(0), "batch": a.batch}
    for kind in ("file", "cut"):
        blobs = load(os.path.join(a.dir, kind))
        mean_bytes = sum(int(b.numel()) for b in blobs) / len(blobs)
        img_s, pixels = rate(blobs, a.batch, a.seconds)
        result[kind] = {"images": len(blobs), "mean_bytes": mean_bytes, "img_s": img_s,
                        "input_mb_s": img_s * mean_bytes / 1e6, "mean_decoded_pixels": pixels}
        print(f"{kind}: {len(blobs)} JPEGs, mean {mean_bytes / 1024:.1f} KB, {pixels / 1e3:.0f} K pixels decoded each: "
              f"{img_s:,.0f} img/s ({img_s * mean_bytes / 1e6:,.0f} MB/s in)")
    result["cut_over_file"] = result["cut"]["img_s"] / result["file"]["img_s"]
    print(f"cut / file: {result['cut_over_file']:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
