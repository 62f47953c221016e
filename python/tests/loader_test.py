#!/usr/bin/python3
"""The Python package against real processes: a coordinator and two workers on loopback, a generated tar dataset,
and stoker.Loader in this process (through libstoker_c.so). Proves, on the host path (CI has no GPU):

  - two ranks over two epochs: every sample exactly once per epoch, the same number of batches per rank;
  - the output equals a numpy reference built from the received pixels: float32 NCHW exactly, bfloat16 NHWC
    bit for bit (round to nearest even);
  - a batch's memory goes back when its last array is freed; holding `depth` batches is a clear error, not a hang;
  - checkpoint and resume in a new Loader: the epoch still delivers every sample once;
  - bad input: an unknown flag, a bad dtype, an unknown job, an unreachable coordinator: StokerError, with its code.
With PyTorch and a GPU (the GPU machine) it also checks CUDA tensors: float32 against the reference, bfloat16
channels_last, labels on the device, the consumer being PyTorch's current stream.

    PYTHONPATH=build/python /usr/bin/python3 python/tests/loader_test.py --bin-dir build/bin
"""
import argparse
import gc
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

import stoker
from stoker import _capi

BIN = None
SERVER_ENV = None  # the environment of the processes this test starts (--server-lib-dir)
MEAN = np.array([123.675, 116.28, 103.53], np.float32)
STD = np.array([58.395, 57.12, 57.375], np.float32)
INV_STD = (np.float32(1) / STD).astype(np.float32)
IMAGES = 96
SIZE = 64


def reference_float32(pixels):
    """(pixel - mean) * (1 / std) in float32, NHWC, as the Loader computes it."""
    return (pixels.astype(np.float32) - MEAN) * INV_STD


def bfloat16_bits(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def wait_for_file(path, proc, deadline_s=30):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            with open(path) as f:
                return f.read().strip()
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} before writing {path}")
        time.sleep(0.05)
    raise RuntimeError(f"no {path} within {deadline_s} s")


class Cluster:
    """A coordinator and two workers as separate processes, on loopback ports they pick."""

    def __init__(self, work):
        self.work = work
        self.procs = []
        self.logs = []
        endpoint_file = os.path.join(work, "coordinator.endpoint")
        coordinator = self._start("coordinator", [os.path.join(BIN, "stoker-coordinator"),
                                                  "--listen=tcp://127.0.0.1:0", f"--endpoint-file={endpoint_file}",
                                                  "--metrics-listen=127.0.0.1:0"])
        self.endpoint = wait_for_file(endpoint_file, coordinator)
        for i in range(2):
            f = os.path.join(work, f"worker{i}.endpoint")
            w = self._start(f"worker{i}", [os.path.join(BIN, "stoker-worker"), f"--coordinator={self.endpoint}",
                                           "--listen=tcp://127.0.0.1:0", "--threads=1", f"--endpoint-file={f}",
                                           "--metrics-listen=127.0.0.1:0"])
            wait_for_file(f, w)

    def _start(self, name, argv):
        log = open(os.path.join(self.work, name + ".log"), "w")
        self.logs.append(log)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=SERVER_ENV)
        self.procs.append(proc)
        return proc

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        for log in self.logs:
            log.close()


class LoaderTest(unittest.TestCase):
    work = cluster = manifest = None
    jobs = 0

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="stoker-py-")
        data = os.path.join(cls.work, "data")
        cls.manifest = os.path.join(cls.work, "data.stoker")
        subprocess.run([os.path.join(BIN, "stoker"), "gen-dataset", data, f"--images={IMAGES}", "--per-shard=32"],
                       check=True, stdout=subprocess.DEVNULL, timeout=120, env=SERVER_ENV)
        subprocess.run([os.path.join(BIN, "stoker"), "index", data, "-o", cls.manifest], check=True,
                       stdout=subprocess.DEVNULL, timeout=120, env=SERVER_ENV)
        cls.cluster = Cluster(cls.work)

    @classmethod
    def tearDownClass(cls):
        if cls.cluster:
            cls.cluster.stop()
        if os.environ.get("STOKER_KEEP") is None:
            shutil.rmtree(cls.work, ignore_errors=True)

    def job(self, **overrides):
        LoaderTest.jobs += 1
        spec = dict(job=f"py{LoaderTest.jobs}", manifest=self.manifest, batch_size=8, ranks=1, epochs=1, seed=7,
                    image_height=SIZE, image_width=SIZE, device=-1, framework="numpy", timeout=60,
                    connect_timeout="10s")
        spec.update(overrides)
        return spec

    def open(self, spec, **more):
        return stoker.Loader(self.cluster.endpoint, **dict(spec, **more))

    def test_two_ranks_two_epochs_exactly_once_and_exact_conversion(self):
        spec = self.job(ranks=2, epochs=2)
        loaders = [self.open(spec, rank=r) for r in range(2)]
        try:
            steps = loaders[0].steps_per_epoch
            self.assertEqual(steps, IMAGES // (2 * 8))
            for epoch in range(2):
                seen = []
                for r, loader in enumerate(loaders):
                    batches = 0
                    for batch in loader.batches():
                        self.assertEqual(batch.epoch, epoch)
                        self.assertEqual(batch.images.shape, (8, 3, SIZE, SIZE))
                        self.assertEqual(batch.images.dtype, np.float32)
                        expected = reference_float32(batch.pixels).transpose(0, 3, 1, 2)
                        np.testing.assert_array_equal(batch.images, expected)
                        np.testing.assert_array_equal(batch.labels, batch.host_labels)
                        self.assertFalse(batch.padding.any())
                        seen.extend(batch.sample_ids.tolist())
                        batches += 1
                        del batch
                    self.assertEqual(batches, steps, f"rank {r}, epoch {epoch}")
                self.assertEqual(sorted(seen), list(range(IMAGES)), f"epoch {epoch}: every sample exactly once")
            for loader in loaders:
                self.assertEqual(list(loader), [])  # the job is over
                self.assertTrue(loader.finished)
                stats = loader.stats()
                self.assertEqual(stats["batches"], 2 * steps)
                self.assertEqual(stats["samples_delivered"], 2 * steps * 8)
                self.assertEqual(stats["dropped_bad_frame"], 0)
                self.assertEqual(stats["connected_workers"], 2)  # both workers of the cluster fed it
        finally:
            for loader in loaders:
                loader.close()

    def test_bfloat16_channels_last_bit_for_bit(self):
        with self.open(self.job(dtype="bfloat16", layout="nhwc")) as loader:
            n = 0
            for batch in loader.batches():
                self.assertEqual(batch.images.dtype, np.uint16)  # numpy has no bfloat16: its bits
                self.assertEqual(batch.images.shape, (8, 3, SIZE, SIZE))
                self.assertEqual(batch.images.strides, (SIZE * SIZE * 3 * 2, 2, SIZE * 3 * 2, 3 * 2))  # channels_last
                expected = bfloat16_bits(reference_float32(batch.pixels)).transpose(0, 3, 1, 2)
                np.testing.assert_array_equal(batch.images, expected)
                n += 1
            self.assertEqual(n, IMAGES // 8)

    def test_memory_returns_when_the_last_array_goes(self):
        with self.open(self.job(depth=2, prefetch=4)) as loader:
            first = loader.next()
            images_of_second = loader.next().images  # the Batch object is gone; its images keep it alive
            with self.assertRaises(stoker.StokerError) as held:
                loader.next()
            self.assertEqual(held.exception.code, _capi.RESOURCE_EXHAUSTED, str(held.exception))
            del first
            gc.collect()
            third = loader.next()  # first's slot came back
            self.assertIsNotNone(third)
            ids = set(third.sample_ids.tolist())
            del images_of_second, third
            for batch in loader.batches():
                ids.update(batch.sample_ids.tolist())
            self.assertEqual(len(ids), IMAGES - 16)  # the two batches taken before: the rest exactly once

    def test_checkpoint_and_resume_in_a_new_loader(self):
        spec = self.job(epochs=1)
        seen = []
        loader = self.open(spec)
        for _ in range(5):
            seen.extend(loader.next().sample_ids.tolist())
        token = loader.checkpoint()
        self.assertTrue(token)
        loader.close()
        with self.open(spec, resume_token=token) as resumed:
            for batch in resumed.batches():
                seen.extend(batch.sample_ids.tolist())
            self.assertEqual(list(resumed), [])
            self.assertTrue(resumed.finished)
        self.assertEqual(sorted(seen), list(range(IMAGES)))

    def test_waits_in_slices_that_time_out_lose_nothing(self):
        # Regression: a slice that timed out used to stop the Loader, and iteration ended early without an error.
        from stoker import loader as loader_module
        saved = loader_module._SLICE_MS
        loader_module._SLICE_MS = 1  # nearly every slice times out
        try:
            with self.open(self.job(epochs=2)) as loader:
                for epoch in range(2):
                    ids = [i for batch in loader.batches() for i in batch.sample_ids.tolist()]
                    self.assertEqual(len(ids), IMAGES, f"epoch {epoch}")
                    self.assertEqual(len(set(ids)), IMAGES, f"epoch {epoch}")
                self.assertEqual(list(loader), [])
                self.assertTrue(loader.finished)
                self.assertFalse(loader.stopped)
        finally:
            loader_module._SLICE_MS = saved

    def test_bad_input_is_a_clear_error(self):
        with self.assertRaises(stoker.StokerError) as e:
            self.open(self.job(bogus_flag=1))
        self.assertEqual(e.exception.code, _capi.INVALID_ARGUMENT)
        self.assertIn("bogus-flag", str(e.exception))
        with self.assertRaises(stoker.StokerError) as e:
            self.open(self.job(dtype="float64"))
        self.assertEqual(e.exception.code, _capi.INVALID_ARGUMENT)
        self.assertIn("dtype", str(e.exception))
        with self.assertRaises(stoker.StokerError) as e:
            stoker.Loader(self.cluster.endpoint, "no-such-job", attach=True, device=-1, framework="numpy",
                          connect_timeout="10s")
        self.assertEqual(e.exception.code, _capi.NOT_FOUND, str(e.exception))
        started = time.monotonic()
        with self.assertRaises(stoker.StokerError) as e:
            stoker.Loader("tcp://127.0.0.1:9", **dict(self.job(), connect_timeout="1s"))
        self.assertIn(e.exception.code, (_capi.UNAVAILABLE, _capi.DEADLINE_EXCEEDED), str(e.exception))
        self.assertLess(time.monotonic() - started, 30)

    def test_torch_cuda_tensors(self):
        try:
            import torch
        except ImportError:
            self.skipTest("no PyTorch")
        if not torch.cuda.is_available():
            self.skipTest("no CUDA device")
        spec = self.job(device=0, framework="torch")
        with self.open(spec) as loader:
            n = 0
            for images, labels in loader:
                self.assertTrue(images.is_cuda and labels.is_cuda)
                self.assertEqual(images.dtype, torch.float32)
                self.assertEqual(labels.dtype, torch.int64)
                n += 1
            self.assertEqual(n, IMAGES // 8)
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream), self.open(self.job(device=0, framework="torch", dtype="bfloat16",
                                                           layout="nhwc")) as loader:
            for batch in loader.batches():
                images = batch.images
                self.assertEqual(images.dtype, torch.bfloat16)
                self.assertTrue(images.is_contiguous(memory_format=torch.channels_last))
                expected = torch.from_numpy(bfloat16_bits(reference_float32(batch.pixels))).view(torch.bfloat16)
                got = images.permute(0, 2, 3, 1).cpu()  # on `stream`, PyTorch's current stream here
                self.assertTrue(torch.equal(got, expected))
                self.assertTrue(torch.equal(batch.labels.cpu(), torch.from_numpy(batch.host_labels)))


def main():
    global BIN, SERVER_ENV
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--server-lib-dir", help="LD_LIBRARY_PATH for the coordinator, workers and CLI only (a "
                        "bundle's libraries, kept away from this process's PyTorch)")
    args, rest = parser.parse_known_args()
    BIN = os.path.abspath(args.bin_dir)
    if args.server_lib_dir:
        SERVER_ENV = dict(os.environ, LD_LIBRARY_PATH=os.path.abspath(args.server_lib_dir))
    unittest.main(argv=[sys.argv[0], "-v"] + rest)


if __name__ == "__main__":
    main()
