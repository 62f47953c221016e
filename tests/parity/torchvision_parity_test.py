#!/usr/bin/env python3
"""The worker's pixels against torchvision's on the same JPEGs ("if pixels change, say by how much").

JPEGs of several sizes and chroma subsamplings are made with Pillow, in YCbCr and in CMYK (Adobe's inverted
convention, as Pillow writes it), and in YCCK (what Photoshop writes for CMYK; Pillow cannot, so
tests/parity/jpeg_encode writes them through libjpeg-turbo), baseline and progressive. The worker's pipeline runs on
them through tests/parity/pipeline_dump; a sample it quarantines fails the test. For each sample, the reference is torchvision applied to the same file opened with
Pillow:
  train: F.resized_crop(img, crop, 224, BILINEAR), then F.hflip when the sample flips (the worker's crop and flip,
         drawn from its own seeded generator, come from the dump);
  eval:  Resize(256) then CenterCrop(224).
With the default resize kernel (pillow), every sample decoded at full size must be byte for byte torchvision's.
Samples decoded at a DCT reduction (crops at least twice the output) must be close: mean difference under 3 levels.
The OpenCV kernel (what jobs got before) is measured and printed for the record, not required to match. Prints a
table of exact pixels, mean and max difference per case.

  torchvision_parity_test.py --dump build/bin/pipeline_dump --encode build/bin/jpeg_encode
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

# (width, height, quality, subsampling: 0 = 4:4:4, 1 = 4:2:2, 2 = 4:2:0 or subsampled, colour space, progressive)
IMAGES = [(500, 375, 96, 0, "ycbcr", False), (375, 500, 90, 2, "ycbcr", False), (1200, 900, 92, 0, "ycbcr", False),
          (300, 257, 95, 1, "ycbcr", False), (64, 48, 96, 0, "ycbcr", False), (2000, 600, 90, 2, "ycbcr", False),
          (500, 375, 95, 0, "cmyk", False), (1400, 1000, 90, 2, "cmyk", True),
          (500, 375, 92, 0, "ycck", True), (900, 700, 90, 2, "ycck", False)]
SAMPLES_PER_IMAGE = 8


def make_images(directory, encode):
    rng = np.random.default_rng(5)
    paths = []
    for i, (w, h, quality, subsampling, space, progressive) in enumerate(IMAGES):
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x + y) * 3) % 256,
                         ((x - y) * 2) % 256], axis=-1)
        noise = rng.integers(-16, 16, size=(h, w, 4))  # texture that JPEG keeps, like a photo's
        pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
        path = os.path.join(directory, f"{i}-{space}.jpg")
        if space == "ycbcr":
            Image.fromarray(pixels[..., :3]).save(path, quality=quality, subsampling=subsampling)
        elif space == "cmyk":  # all four inks vary, K included
            Image.fromarray(pixels, mode="CMYK").save(path, quality=quality, subsampling=subsampling,
                                                      progressive=progressive)
        else:
            raw = os.path.join(directory, f"{i}.rgb")
            pixels[..., :3].tofile(raw)
            flags = ["--subsampled"] if subsampling else []
            flags += ["--progressive"] if progressive else []
            subprocess.run([encode, "--width", str(w), "--height", str(h), "--quality", str(quality),
                            "--colour-space", space, *flags, raw, path], check=True, timeout=60)
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


def colour_space(path):
    return os.path.splitext(path)[0].rsplit("-", 1)[1]


def compare(dump, directory, files, mode, kernel):
    """(file, diff) pairs of the samples decoded at full size, and of those decoded at a DCT reduction."""
    flags = ["--pipeline", mode, "--resize-kernel", kernel]
    lines, outputs = run_dump(dump, os.path.join(directory, f"{mode}-{kernel}"), files, flags)
    full, reduced = [], []
    for line, got in zip(lines, outputs):
        want = reference(line, mode)
        diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
        (full if line["reduction"] == 1 else reduced).append((line["file"], diff))
    return full, reduced


def summary(diffs):
    if not diffs:
        return "-", "-", "-", 0
    all_diffs = np.concatenate([d.ravel() for _, d in diffs])
    return (f"{100.0 * np.mean(all_diffs == 0):.2f} %", f"{all_diffs.mean():.3f}", str(int(all_diffs.max())),
            len(diffs))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", required=True, help="the pipeline_dump binary")
    parser.add_argument("--encode", required=True, help="the jpeg_encode binary (YCCK files)")
    args = parser.parse_args()
    failures = []
    with tempfile.TemporaryDirectory(prefix="stoker-parity-") as directory:
        images = make_images(directory, args.encode)
        for path in images:  # each file is what it claims: Pillow's mode and Adobe's transform flag (2 = YCCK)
            info = Image.open(path)
            want = {"ycbcr": ("RGB", None), "cmyk": ("CMYK", 0), "ycck": ("CMYK", 2)}[colour_space(path)]
            if (info.mode, info.info.get("adobe_transform")) != want:
                failures.append(f"{path}: made as {colour_space(path)} but reads as {info.mode}, "
                                f"Adobe transform {info.info.get('adobe_transform')}")
        files = [path for path in images for _ in range(SAMPLES_PER_IMAGE)]
        print(f"{'case':<28} {'decoded at':<12} {'samples':>7} {'exact pixels':>13} {'mean diff':>10} {'max':>4}")
        for mode in ("train", "eval"):
            for kernel in ("pillow", "opencv"):
                full, reduced = compare(args.dump, directory, files, mode, kernel)
                for space in ("ycbcr", "cmyk", "ycck"):
                    for label, diffs in (("full size", full), ("1/2 .. 1/8", reduced)):
                        exact, mean, worst, n = summary([(f, d) for f, d in diffs if colour_space(f) == space])
                        case = f"{mode} {kernel} {space}"
                        print(f"{case:<28} {label:<12} {n:>7} {exact:>13} {mean:>10} {worst:>4}")
                if kernel == "pillow":
                    for space in ("ycbcr", "cmyk", "ycck"):
                        if not any(colour_space(f) == space for f, _ in full):
                            failures.append(f"{mode}: no {space} sample was decoded at full size; the test proves "
                                            "nothing for them")
                    for f, d in full:
                        if d.max() != 0:
                            failures.append(f"{mode} pillow: a sample of {os.path.basename(f)} decoded at full "
                                            f"size differs from torchvision (max {int(d.max())}, mean "
                                            f"{d.mean():.3f})")
                    if mode == "train" and not reduced:
                        failures.append("train: no sample was decoded at a DCT reduction; the test proves nothing")
                    for f, d in reduced:
                        if d.mean() >= 3.0:
                            failures.append(f"{mode} pillow: a sample of {os.path.basename(f)} decoded at a "
                                            f"reduction differs from torchvision by {d.mean():.2f} on average (>= 3)")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
