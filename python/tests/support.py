"""What the Python package's tests (and bench/lightning_bench.py) share: a coordinator and workers as separate
processes on loopback, a generated tar dataset indexed into a manifest, the delivery checker (`stoker check`) over
the logs of processes of which some were resumed from checkpoints, and the numpy reference of the conversion."""
import os
import shutil
import signal
import subprocess
import tempfile
import time

import numpy as np

from stoker import delivery_log

MEAN = np.array([123.675, 116.28, 103.53], np.float32)  # the Loader's defaults, ImageNet's, in pixel units
STD = np.array([58.395, 57.12, 57.375], np.float32)
INV_STD = (np.float32(1) / STD).astype(np.float32)


def reference_float32(pixels):
    """(pixel - mean) * (1 / std) in float32, NHWC, as the Loader computes it."""
    return (pixels.astype(np.float32) - MEAN) * INV_STD


def bfloat16_bits(x):
    """float32 -> bfloat16 bits, rounded to nearest even, as the Loader converts."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def wait_for_file(path, proc, deadline_s=30):
    """The contents of `path` once written by `proc`; RuntimeError if it exits first or the deadline passes."""
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
    """A coordinator and `workers` workers as separate processes, on loopback ports they pick, with a dataset of
    `images` generated JPEGs. bin_dir: the stoker binaries; server_env: their environment (a bundle's libraries)."""

    def __init__(self, bin_dir, images, workers=2, worker_threads=1, coordinator_flags=(), server_env=None,
                 work=None):
        self.bin_dir = bin_dir
        self.env = server_env
        self.work = work or tempfile.mkdtemp(prefix="stoker-py-")
        self.procs, self.logs = [], []
        try:
            self.manifest = self._dataset(images)
            endpoint_file = os.path.join(self.work, "coordinator.endpoint")
            coordinator = self._start("coordinator", ["stoker-coordinator", "--listen=tcp://127.0.0.1:0",
                                                      f"--endpoint-file={endpoint_file}",
                                                      "--metrics-listen=127.0.0.1:0", *coordinator_flags])
            self.endpoint = wait_for_file(endpoint_file, coordinator)
            for i in range(workers):
                f = os.path.join(self.work, f"worker{i}.endpoint")
                w = self._start(f"worker{i}", ["stoker-worker", f"--coordinator={self.endpoint}",
                                               "--listen=tcp://127.0.0.1:0", f"--threads={worker_threads}",
                                               f"--endpoint-file={f}", "--metrics-listen=127.0.0.1:0"])
                wait_for_file(f, w)
        except BaseException:
            self.stop()
            raise

    def _dataset(self, images):
        data = os.path.join(self.work, "data")
        manifest = os.path.join(self.work, "data.stoker")
        cli = os.path.join(self.bin_dir, "stoker")
        subprocess.run([cli, "gen-dataset", data, f"--images={images}", "--per-shard=32"], check=True,
                       stdout=subprocess.DEVNULL, timeout=120, env=self.env)
        subprocess.run([cli, "index", data, "-o", manifest], check=True, stdout=subprocess.DEVNULL, timeout=120,
                       env=self.env)
        return manifest

    def _start(self, name, argv):
        log = open(os.path.join(self.work, name + ".log"), "w")
        self.logs.append(log)
        proc = subprocess.Popen([os.path.join(self.bin_dir, argv[0])] + argv[1:], stdout=log,
                                stderr=subprocess.STDOUT, env=self.env)
        self.procs.append(proc)
        return proc

    def check(self, logs, **job_flags):
        """Runs `stoker check` over delivery logs, each a path or a list of log lines, with the job's flags (ranks=2,
        batch_size=8, ...). Returns (exit code, output): 0 when every epoch delivered every planned sample exactly
        once and every rank the same number of batches."""
        paths = []
        for i, entry in enumerate(logs):
            if isinstance(entry, str):
                paths.append(entry)
                continue
            path = os.path.join(self.work, f"check-{time.monotonic_ns()}-{i}.log")
            with open(path, "w") as f:
                f.write("".join(line + "\n" for line in entry))
            paths.append(path)
        flags = [f"--{k.replace('_', '-')}={v}" for k, v in job_flags.items()]
        r = subprocess.run([os.path.join(self.bin_dir, "stoker"), "check", f"--manifest={self.manifest}", *flags,
                            *paths], capture_output=True, text=True, timeout=60, env=self.env)
        return r.returncode, r.stdout + r.stderr

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
        if os.environ.get("STOKER_KEEP") is None:
            shutil.rmtree(self.work, ignore_errors=True)


def resumed_logs(first, second, state):
    """The delivery log lines of a run resumed from `state` (Loader.state_dict()): the first process's batches
    before the state's position, then everything the resumed process took."""
    return (delivery_log.before(first, state["position"], state["steps_per_epoch"])
            + [line for _, _, _, line in delivery_log.read(second)])

