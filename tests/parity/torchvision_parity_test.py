#!/usr/bin/env python3
"""The worker's pixels against torchvision's on the same JPEGs (issue 18's "if pixels change, say by how much").

JPEGs of several sizes and chroma subsamplings are made with Pillow. The worker's pipeline runs on them through
tests/parity/pipeline_dump. For each sample, the reference is torchvision applied to the same file opened with
Pillow:
  train: F.resized_crop(img, crop, 224, BILINEAR), then F.hflip when the sample flips (the worker's crop and flip,
         drawn from its own seeded generator, come from the dump);
  eval:  Resize(256) then CenterCrop(224).
With the default resize kernel (pillow), every sample decoded at full size must be byte for byte torchvision's.
Samples decoded at a DCT reduction (crops at least twice the output) must be close: mean difference under 3 levels.
The OpenCV kernel (what jobs got before) is measured and printed for the record, not required to match. Prints a
table of exact pixels, mean and max difference per case.

  torchvision_parity_test.py --dump build/bin/pipeline_dump
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image
import torchvision.transforms as T
import torchvision.transforms.functional as F

# (width, height, quality, Pillow subsampling: 0 = 4:4:4, 1 = 4:2:2, 2 = 4:2:0)
IMAGES = [(500, 375, 96, 0), (375, 500, 90, 2), (1200, 900, 92, 0), (300, 257, 95, 1), (64, 48, 96, 0),
          (2000, 600, 90, 2)]
SAMPLES_PER_IMAGE = 8


def make_images(directory):
    rng = np.random.default_rng(5)
    paths = []
    for i, (w, h, quality, subsampling) in enumerate(IMAGES):
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x + y) * 3) % 256], axis=-1)
        noise = rng.integers(-16, 16, size=(h, w, 3))  # texture that JPEG keeps, like a photo's
        pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
        path = os.path.join(directory, f"{i}.jpg")
        Image.fromarray(pixels).save(path, quality=quality, subsampling=subsampling)
        paths.append(path)
    return paths


def run_dump(dump, out_dir, files, flags):
    os.makedirs(out_dir, exist_ok=True)
    result = subprocess.run([dump, "--out", out_dir, "--seed", "7", *flags, *files], capture_output=True, text=True,
                            timeout=120)
    if result.returncode != 0:
        sys.exit(f"pipeline_dump failed ({result.returncode}): {result.stderr}")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    outputs = [np.fromfile(os.path.join(out_dir, f"{i}.rgb"), dtype=np.uint8).reshape(224, 224, 3)
               for i in range(len(lines))]
    return lines, outputs


def reference(line, mode):
    img = Image.open(line["file"]).convert("RGB")
    if mode == "eval":
        return np.asarray(T.CenterCrop(224)(T.Resize(256, interpolation=T.InterpolationMode.BILINEAR)(img)))
    x, y, w, h = line["crop"]
    out = F.resized_crop(img, y, x, h, w, [224, 224], interpolation=T.InterpolationMode.BILINEAR)
    if line["flip"]:
        out = F.hflip(out)
    return np.asarray(out)


def compare(dump, directory, files, mode, kernel):
    flags = ["--pipeline", mode, "--resize-kernel", kernel]
    lines, outputs = run_dump(dump, os.path.join(directory, f"{mode}-{kernel}"), files, flags)
    full, reduced = [], []
    for line, got in zip(lines, outputs):
        want = reference(line, mode)
        diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
        (full if line["reduction"] == 1 else reduced).append(diff)
    return full, reduced


def summary(diffs):
    if not diffs:
        return "-", "-", "-", 0
    all_diffs = np.concatenate([d.ravel() for d in diffs])
    return (f"{100.0 * np.mean(all_diffs == 0):.2f} %", f"{all_diffs.mean():.3f}", str(int(all_diffs.max())),
            len(diffs))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", required=True, help="the pipeline_dump binary")
    args = parser.parse_args()
    failures = []
    with tempfile.TemporaryDirectory(prefix="stoker-parity-") as directory:
        images = make_images(directory)
        files = [path for path in images for _ in range(SAMPLES_PER_IMAGE)]
        print(f"{'case':<22} {'decoded at':<12} {'samples':>7} {'exact pixels':>13} {'mean diff':>10} {'max':>4}")
        for mode in ("train", "eval"):
            for kernel in ("pillow", "opencv"):
                full, reduced = compare(args.dump, directory, files, mode, kernel)
                for label, diffs in (("full size", full), ("1/2 .. 1/8", reduced)):
                    exact, mean, worst, n = summary(diffs)
                    print(f"{mode + ' ' + kernel:<22} {label:<12} {n:>7} {exact:>13} {mean:>10} {worst:>4}")
                if kernel == "pillow":
                    if not full:
                        failures.append(f"{mode}: no sample was decoded at full size; the test proves nothing")
                    for i, d in enumerate(full):
                        if d.max() != 0:
                            failures.append(f"{mode} pillow: sample {i} decoded at full size differs from "
                                            f"torchvision (max {int(d.max())}, mean {d.mean():.3f})")
                    if mode == "train" and not reduced:
                        failures.append("train: no sample was decoded at a DCT reduction; the test proves nothing")
                    for d in reduced:
                        if d.mean() >= 3.0:
                            failures.append(f"{mode} pillow: a sample decoded at a reduction differs from "
                                            f"torchvision by {d.mean():.2f} on average (>= 3)")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
