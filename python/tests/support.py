"""What the Python package's tests (and the GPU machine's bench/*.py) share: a coordinator and workers as separate
processes on loopback, a generated tar dataset indexed into a manifest, the delivery checker (`stoker check`) over
the logs of processes of which some were resumed from checkpoints, and the numpy reference of the conversion."""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import numpy as np

from stoker import _state as stoker_state
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


def pinned(cores):
    """A Popen preexec_fn that pins the child to the set `cores` (None: the scheduler places it)."""
    return (lambda: os.sched_setaffinity(0, cores)) if cores else None


def make_dataset(bin_dir, work, images, env=None, index=True):
    """Generates `images` JPEGs in tar shards of 32 at work/data and, if `index`, indexes them into work/data.stoker:
    returns the manifest's path (or the data folder's)."""
    data = os.path.join(work, "data")
    manifest = os.path.join(work, "data.stoker")
    cli = os.path.join(bin_dir, "stoker")
    subprocess.run([cli, "gen-dataset", data, f"--images={images}", "--per-shard=32"], check=True,
                   stdout=subprocess.DEVNULL, timeout=120, env=env)
    if not index:
        return data
    subprocess.run([cli, "index", data, "-o", manifest], check=True, stdout=subprocess.DEVNULL, timeout=120, env=env)
    return manifest


def check_logs(bin_dir, manifest, work, logs, env=None, **job_flags):
    """Runs `stoker check` over delivery logs, each a path or a list of log lines (written to files in `work`), with
    the job's flags (ranks=2, batch_size=8, ...). Returns (exit code, output): 0 when every epoch delivered every
    planned sample exactly once and every rank the same number of batches."""
    paths = []
    for i, entry in enumerate(logs):
        if isinstance(entry, str):
            paths.append(entry)
            continue
        path = os.path.join(work, f"check-{time.monotonic_ns()}-{i}.log")
        with open(path, "w") as f:
            f.write("".join(line + "\n" for line in entry))
        paths.append(path)
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in job_flags.items()]
    r = subprocess.run([os.path.join(bin_dir, "stoker"), "check", f"--manifest={manifest}", *flags, *paths],
                       capture_output=True, text=True, timeout=60, env=env)
    return r.returncode, r.stdout + r.stderr


class Cluster:
    """A coordinator and `workers` workers as separate processes, on loopback ports they pick, with a dataset of
    `images` generated JPEGs (or an existing `manifest`). bin_dir: the stoker binaries; server_env: their environment
    (a bundle's libraries). The benchmarks add flags (worker_flags, coordinator_flags) and pin processes to cores
    (coordinator_cores, worker_cores: a set of cores, and one per worker); state() reads the coordinator's /state.

    CURVE is on, as in production: the cluster makes a keyring (`stoker keygen --keyring`) and gives the servers their
    keys; clients find theirs in STOKER_KEY_FILE / STOKER_TRUST_FILE, which the cluster sets in this process's
    environment (and children inherit), as a Kubernetes pod would from its Secret. insecure=True runs everything
    with --insecure instead (STOKER_INSECURE=true for clients): the benchmarks' baseline for what security costs."""

    def __init__(self, bin_dir, images, workers=2, worker_threads=1, coordinator_flags=(), server_env=None,
                 work=None, manifest=None, worker_flags=(), coordinator_cores=None, worker_cores=None, keep=False,
                 insecure=False):
        self.bin_dir = bin_dir
        self.env = server_env
        self.work = work or tempfile.mkdtemp(prefix="stoker-py-")
        os.makedirs(self.work, exist_ok=True)
        self.keep = keep  # leave the work folder (logs, keys) after stop(), as STOKER_KEEP does
        self.insecure = insecure
        self.procs, self.logs = [], []
        try:
            self.manifest = manifest or self._dataset(images)
            self.keys = self._keyring()
            endpoint_file = self._fresh("coordinator.endpoint")
            metrics_file = self._fresh("coordinator.metrics")
            coordinator = self._start("coordinator", ["stoker-coordinator", "--listen=tcp://127.0.0.1:0",
                                                      f"--endpoint-file={endpoint_file}",
                                                      "--metrics-listen=127.0.0.1:0",
                                                      f"--metrics-address-file={metrics_file}",
                                                      *self._keys("coordinator"), *coordinator_flags],
                                      coordinator_cores)
            self.endpoint = wait_for_file(endpoint_file, coordinator)
            self.metrics = wait_for_file(metrics_file, coordinator)
            for i in range(workers):
                f = self._fresh(f"worker{i}.endpoint")
                w = self._start(f"worker{i}", ["stoker-worker", f"--coordinator={self.endpoint}",
                                               "--listen=tcp://127.0.0.1:0", f"--threads={worker_threads}",
                                               f"--endpoint-file={f}", "--metrics-listen=127.0.0.1:0",
                                               *self._keys("worker"), *worker_flags],
                                worker_cores[i] if worker_cores else None)
                wait_for_file(f, w)
        except BaseException:
            self.stop()
            raise

    def _fresh(self, name):
        """A path in the work folder with nothing at it (an endpoint file of an earlier cluster there is removed)."""
        path = os.path.join(self.work, name)
        if os.path.exists(path):
            os.remove(path)
        return path

    def state(self):
        """The coordinator's /state as a dict (its jobs, workers and recommended-workers advice); None if it does
        not answer within 2 s."""
        try:
            with urllib.request.urlopen(f"http://{self.metrics}/state", timeout=2) as r:
                return json.load(r)
        except (OSError, ValueError):
            return None

    def _keyring(self):
        if self.insecure:
            self.client_env = {"STOKER_INSECURE": "true"}
            os.environ.update(self.client_env)
            return None
        keys = os.path.join(self.work, "keys")
        subprocess.run([os.path.join(self.bin_dir, "stoker"), "keygen", f"--keyring={keys}"], check=True,
                       stdout=subprocess.DEVNULL, timeout=60, env=self.env)
        self.client_env = {"STOKER_KEY_FILE": os.path.join(keys, "client.key"),
                           "STOKER_TRUST_FILE": os.path.join(keys, "trust")}
        os.environ.update(self.client_env)
        return keys

    def _keys(self, role):
        if self.insecure:
            return ["--insecure"]
        return [f"--key-file={os.path.join(self.keys, role + '.key')}", f"--trust-file={os.path.join(self.keys, 'trust')}"]

    def _dataset(self, images):
        return make_dataset(self.bin_dir, self.work, images, self.env)

    def _start(self, name, argv, cores=None):
        """Starts a server from bin_dir, its output in NAME.log; pinned to the set `cores` when given."""
        log = open(os.path.join(self.work, name + ".log"), "w")
        self.logs.append(log)
        proc = subprocess.Popen([os.path.join(self.bin_dir, argv[0])] + argv[1:], stdout=log,
                                stderr=subprocess.STDOUT, env=self.env, preexec_fn=pinned(cores))
        self.procs.append(proc)
        return proc

    def check(self, logs, **job_flags):
        """check_logs over this cluster's dataset."""
        return check_logs(self.bin_dir, self.manifest, self.work, logs, self.env, **job_flags)

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
        if not self.keep and os.environ.get("STOKER_KEEP") is None:
            shutil.rmtree(self.work, ignore_errors=True)


def resumed_logs(first, second, state):
    """The delivery log lines of a run resumed from `state` (Loader.state_dict()): the first process's batches
    before the state's position, then everything the resumed process took."""
    return delivery_log.before(first, state["position"], state["steps_per_epoch"]) + delivery_log.lines(second)



def find_state(checkpoint):
    """The stoker.Loader state inside a training checkpoint, wherever the framework keeps it (Lightning: deep in
    its loops' state), or None."""
    if isinstance(checkpoint, dict):
        if checkpoint.get("format") == stoker_state.FORMAT:
            return checkpoint
        checkpoint = list(checkpoint.values())
    if isinstance(checkpoint, (list, tuple)):
        for value in checkpoint:
            found = find_state(value)
            if found is not None:
                return found
    return None


def train_in_stages(cluster, launcher, args, stages, work, env=None, timeout=300, **check_flags):
    """Runs a training script (launcher(ranks) + args: examples/train_ddp.py under torchrun) as a job that is
    checkpointed, stopped and resumed on other shapes would run. Each stage is a dict: ranks, batch_size,
    checkpoint_every, stop_after (steps of that run, as the script counts them; None: to the job's end), resume_at
    (the step in the name of the checkpoint the next stage resumes from, step=N.ckpt; its steps after it are lost)
    and args (more of the script's arguments). Proves with `stoker check` over the
    ranks' delivery logs, each run's cut at the checkpoint the next resumed from, that every epoch's samples were
    trained on exactly once and every rank of a shape took as many steps. Returns {"runs": [summaries per stage],
    "states": [the loader state each stage resumed from], "check": the checker's output}."""
    import torch

    runs, states, logs, resume = [], [], [], None
    for n, stage in enumerate(stages):
        name = f"stage{n}"
        extra = [f"--delivery-log={work}/{name}-{{rank}}.log", f"--summary={work}/{name}-{{rank}}.json",
                 f"--batch-size={stage['batch_size']}", f"--checkpoint-dir={work}/{name}",
                 f"--checkpoint-every={stage.get('checkpoint_every', 0)}"]
        if stage.get("stop_after") is not None:
            extra.append(f"--max-steps={stage['stop_after']}")
        if resume is not None:
            extra.append(f"--resume={resume}")
        cmd = launcher(stage["ranks"]) + args + extra + stage.get("args", [])
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if r.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited with {r.returncode}:\n{r.stdout[-4000:]}{r.stderr[-4000:]}")
        summaries = []
        for rank in range(stage["ranks"]):
            with open(f"{work}/{name}-{rank}.json") as f:
                summaries.append(json.load(f))
        runs.append(summaries)
        paths = [f"{work}/{name}-{rank}.log" for rank in range(stage["ranks"])]
        if stage.get("resume_at") is None:
            logs += [delivery_log.lines(path) for path in paths]
            continue
        resume = os.path.join(work, name, f"step={stage['resume_at']}.ckpt")
        state = find_state(torch.load(resume, map_location="cpu", weights_only=False))
        if state is None:
            raise AssertionError(f"{resume} holds no stoker.Loader state")
        states.append(state)
        logs += [delivery_log.before(path, state["position"], state["steps_per_epoch"]) for path in paths]
    code, out = cluster.check(logs, **check_flags)
    if code != 0:
        raise AssertionError(f"the resumed runs did not deliver every sample exactly once:\n{out}")
    return {"runs": runs, "states": states, "check": out}


def train_and_resume(cluster, launcher, args, ranks, checkpoint_every, stop_after, work, env=None, timeout=240,
                     **check_flags):
    """Runs a training script (launcher + args: examples/train_ddp.py under torchrun, or train_lightning.py) as a
    crashed and resumed job would run: first to `stop_after` steps with a checkpoint every `checkpoint_every` (so
    the steps after the last one are lost), then a new run resumed from the checkpoint at `checkpoint_every`, to the
    end. Proves with `stoker check` over the ranks' delivery logs, cut at the checkpoint, that every planned sample
    was trained on exactly once. Returns {"first": summaries, "second": summaries, "state": the loader state,
    "check": the checker's output}; raises AssertionError (with the output) when a run or the check fails."""
    import torch  # only the resume tests need it

    def run(name, extra):
        cmd = launcher + args + [f"--delivery-log={work}/{name}-{{rank}}.log", f"--summary={work}/{name}-{{rank}}.json",
                                 *extra]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if r.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited with {r.returncode}:\n{r.stdout[-4000:]}{r.stderr[-4000:]}")
        summaries = []
        for rank in range(ranks):
            with open(f"{work}/{name}-{rank}.json") as f:
                summaries.append(json.load(f))
        return summaries

    checkpoints = os.path.join(work, "checkpoints")
    first = run("first", [f"--checkpoint-dir={checkpoints}", f"--checkpoint-every={checkpoint_every}",
                          f"--max-steps={stop_after}"])
    checkpoint = os.path.join(checkpoints, f"step={checkpoint_every}.ckpt")
    state = find_state(torch.load(checkpoint, map_location="cpu", weights_only=False))
    if state is None:
        raise AssertionError(f"{checkpoint} holds no stoker.Loader state")
    second = run("second", [f"--resume={checkpoint}"])
    logs = [resumed_logs(f"{work}/first-{r}.log", f"{work}/second-{r}.log", state) for r in range(ranks)]
    code, out = cluster.check(logs, ranks=ranks, **check_flags)
    if code != 0:
        raise AssertionError(f"the resumed run did not deliver every sample exactly once:\n{out}")
    # Uncut, the steps run after the checkpoint count twice: the check above can see a resume that went wrong.
    code, uncut = cluster.check([f"{work}/{n}-{r}.log" for n in ("first", "second") for r in range(ranks)],
                                ranks=ranks, **check_flags)
    if code == 0:
        raise AssertionError(f"no batch was taken after the checkpoint, so the resume proved nothing:\n{uncut}")
    return {"first": first, "second": second, "state": state, "check": out}


def run_tests(module):
    """A test file's main: --bin-dir (the stoker binaries) and --server-lib-dir (LD_LIBRARY_PATH for the coordinator,
    workers and CLI only: a bundle's libraries, kept away from this process's PyTorch) become the module's BIN and
    SERVER_ENV; the other arguments go to unittest."""
    parser = argparse.ArgumentParser(description=module.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--server-lib-dir")
    args, rest = parser.parse_known_args()
    module.BIN = os.path.abspath(args.bin_dir)
    if args.server_lib_dir:
        module.SERVER_ENV = dict(os.environ, LD_LIBRARY_PATH=os.path.abspath(args.server_lib_dir))
    unittest.main(module=module, argv=[sys.argv[0], "-v"] + rest)
