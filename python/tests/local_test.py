#!/usr/bin/python3
"""Local mode from Python: stoker.Loader("local", ...) starts its own coordinator and workers on this machine, from
a dataset folder it indexes once. Proves, on the host path:

  - two epochs, every sample exactly once (`stoker check`), len() the epoch's steps, the dataset indexed once into
    data.stoker beside it and that manifest reused by the next Loader;
  - the servers are this process's children while the Loader is open, and none is left (nor their private folder)
    after close(), after an exception in the loop, or after the trainer is killed with SIGKILL;
  - a state_dict() taken mid-epoch resumes in a new process (its own new servers) exactly the batches not taken;
  - two processes of a two-rank job (as under torchrun), each with its own servers: every sample once per epoch;
  - bad input is a clear StokerError and leaves no process: local_workers with a coordinator address, a folder
    without the server binaries, a dataset that does not exist.

    PYTHONPATH=build/python /usr/bin/python3 python/tests/local_test.py --bin-dir build/bin
"""
import json
import os
import pickle
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import stoker
import support
from stoker import _capi

BIN = None
SERVER_ENV = None
IMAGES = 64
SERVERS = ("stoker-coordinator", "stoker-worker")


def server_children(parent=None):
    """{pid: program} of the stoker servers whose parent is `parent` (this process), zombies left out."""
    parent = os.getpid() if parent is None else parent
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                program = os.path.basename(f.read().split(b"\0")[0].decode())
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[1]) == parent and program in SERVERS:
            found[int(entry)] = program
    return found


def alive(pid):
    """Whether `pid` runs (a zombie does not: it has exited and waits for whoever reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def private_folders():
    """The servers' private folders: under TMPDIR, which setUpClass points at the test's own folder."""
    return {name for name in os.listdir(os.environ["TMPDIR"]) if name.startswith("stoker-local-")}


class LocalModeTest(unittest.TestCase):
    work = data = None
    jobs = 0

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="stoker-py-local-")
        # The servers' private folders are made here (TMPDIR; XDG_RUNTIME_DIR would come first), where no other test
        # makes any: a folder left behind is this test's.
        os.environ.pop("XDG_RUNTIME_DIR", None)
        os.environ["TMPDIR"] = cls.work
        cls.data = support.make_dataset(BIN, cls.work, IMAGES, SERVER_ENV, index=False)
        cls.manifest = cls.data + ".stoker"  # where local mode keeps the index of a folder it can write beside

    @classmethod
    def tearDownClass(cls):
        if cls.work and os.environ.get("STOKER_KEEP") is None:
            shutil.rmtree(cls.work, ignore_errors=True)

    def setUp(self):
        self.folders_before = private_folders()

    def tearDown(self):
        self.assertEqual(server_children(), {}, "a server outlived its Loader")
        self.assertEqual(private_folders() - self.folders_before, set(), "a private folder outlived its Loader")

    def options(self, **overrides):
        LocalModeTest.jobs += 1
        o = dict(job=f"local-{LocalModeTest.jobs}", manifest=self.data, batch_size=8, epochs=2, seed=7, device=-1,
                 local_workers=2, local_bin_dir=BIN, framework="numpy")
        o.update(overrides)
        return o

    def open(self, **overrides):
        return stoker.Loader("local", **self.options(**overrides))

    def check(self, logs, epochs=2):
        return support.check_logs(BIN, self.manifest, self.work, logs, SERVER_ENV, batch_size=8, epochs=epochs,
                                  seed=7)

    def test_two_epochs_exactly_once_from_a_folder_indexed_once(self):
        log = os.path.join(self.work, "two-epochs.log")
        loader = self.open(delivery_log=log)
        self.assertEqual(server_children(), {}, "the Loader started servers before its first use")
        self.assertEqual(len(loader), IMAGES // 8)
        servers = server_children()
        self.assertEqual(sorted(servers.values()), ["stoker-coordinator", "stoker-worker", "stoker-worker"])
        for epoch in range(2):
            self.assertEqual([(b.epoch, b.index) for b in loader.batches()], [(epoch, i) for i in range(IMAGES // 8)])
        self.assertEqual(list(loader), [])
        self.assertTrue(loader.finished)
        self.assertGreater(loader.stats()["trainer_cpu_seconds"], 0)  # beside the stall: the trainer's own CPU
        indexed = os.stat(self.manifest).st_mtime_ns
        loader.close()
        self.assertFalse(any(alive(pid) for pid in servers), "close() returned before its servers ended")
        code, out = self.check([log])
        self.assertEqual(code, 0, out)
        self.assertEqual(out.count("ok "), 2, out)
        with self.open(epochs=1) as again:  # the folder's manifest is kept, not made again
            self.assertEqual(sum(1 for _ in again.batches()), IMAGES // 8)
        self.assertEqual(os.stat(self.manifest).st_mtime_ns, indexed)

    def test_an_exception_in_the_loop_leaves_no_process(self):
        with self.assertRaisesRegex(RuntimeError, "the training step failed"):
            with self.open() as loader:
                for _ in loader:
                    self.assertEqual(len(server_children()), 3)
                    raise RuntimeError("the training step failed")

    def test_a_trainer_killed_with_sigkill_leaves_no_process(self):
        script = ("import json, os, sys, stoker\nsys.path.insert(0, %r)\nimport local_test\n"
                  "loader = stoker.Loader('local', **%r)\nloader.next()\n"
                  "print(json.dumps(list(local_test.server_children())), flush=True)\nsys.stdin.read()\n"
                  % (os.path.dirname(os.path.abspath(__file__)), self.options()))
        trainer = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True)
        try:
            line = trainer.stdout.readline()
            self.assertTrue(line, "the trainer did not start its Loader")
            servers = json.loads(line)
            self.assertEqual(len(servers), 3)
        finally:
            trainer.send_signal(signal.SIGKILL)
            trainer.communicate(timeout=30)
        deadline = time.monotonic() + 20
        for pid in servers:  # a pidfd becomes readable when its process exits, child of ours or not
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            try:
                select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            finally:
                os.close(fd)
        self.assertEqual([pid for pid in servers if alive(pid)], [], "servers outlived their SIGKILLed trainer")
        # The killed trainer could not remove its private folder: the next local-mode start removes it.
        self.assertEqual(len(private_folders() - self.folders_before), 1)
        with self.open(epochs=1) as loader:
            loader.open()
            self.assertEqual(len(private_folders() - self.folders_before), 1)  # its own, not the abandoned one

    def test_a_state_resumes_in_a_new_process_exactly_the_batches_not_taken(self):
        steps = IMAGES // 8
        first_log, second_log = (os.path.join(self.work, f"resume-{n}.log") for n in ("first", "second"))
        options = self.options()
        loader = stoker.Loader("local", delivery_log=first_log, **options)
        self.assertEqual(sum(1 for _ in loader.batches()), steps)  # epoch 0
        for _ in range(3):
            loader.next()
        state = loader.state_dict()
        self.assertEqual(state["position"], steps + 3)
        loader.next()  # taken after the checkpoint: the resumed process takes it again
        loader.close()
        state_file = os.path.join(self.work, "resume.state")
        with open(state_file, "wb") as f:
            pickle.dump(state, f)
        script = ("import pickle, stoker\nloader = stoker.Loader('local', delivery_log=%r, **%r)\n"
                  "loader.load_state_dict(pickle.load(open(%r, 'rb')))\n"
                  "print(sum(1 for _ in loader.batches()), flush=True)\nloader.close()\n"
                  % (second_log, options, state_file))
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split()[-1], str(steps - 3))
        code, out = self.check([support.resumed_logs(first_log, second_log, state)])
        self.assertEqual(code, 0, out)
        self.assertEqual(out.count("ok "), 2, out)

    def test_each_process_of_a_two_rank_job_serves_its_rank_from_its_own_servers(self):
        # As under torchrun: every process opens the same Loader, its rank from RANK and WORLD_SIZE. Each starts its
        # own servers, which plan the whole job and serve that rank's part of it.
        options = self.options(local_workers=1)
        logs = [os.path.join(self.work, f"ranks-{r}.log") for r in range(2)]
        script = ("import stoker\nloader = stoker.Loader('local', delivery_log=%r, **%r)\n"
                  "print(sum(1 for _ in loader.batches()) + sum(1 for _ in loader.batches()), flush=True)\n"
                  "loader.close()\n" % (os.path.join(self.work, "ranks-{rank}.log"), options))
        ranks = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=dict(os.environ, RANK=str(r), WORLD_SIZE="2")) for r in range(2)]
        for r in ranks:
            out, err = r.communicate(timeout=120)
            self.assertEqual(r.returncode, 0, err)
            self.assertEqual(out.split()[-1], str(2 * IMAGES // 16))
        code, out = support.check_logs(BIN, self.manifest, self.work, logs, SERVER_ENV, batch_size=8, epochs=2,
                                       seed=7, ranks=2)
        self.assertEqual(code, 0, out)
        self.assertEqual(out.count("ok "), 2, out)

    def test_a_forked_child_closing_its_copy_leaves_the_parents_servers_alone(self):
        with self.open(epochs=1) as loader:
            self.assertIsNotNone(loader.next())
            servers = server_children()
            child = os.fork()
            if child == 0:  # as a framework's forked helper that tidies up at exit
                loader.close()
                os._exit(0)
            os.waitpid(child, 0)
            self.assertEqual(server_children(), servers)
            self.assertEqual(len(private_folders() - self.folders_before), 1, "the child removed the servers' folder")
            self.assertEqual(sum(1 for _ in loader.batches()), IMAGES // 8 - 1)

    def test_bad_input_is_a_clear_error_and_leaves_no_process(self):
        with self.assertRaises(ValueError) as e:  # beside a cluster's pool, node-local workers are counted
            stoker.Loader("tcp://127.0.0.1:1", **self.options(local_workers="auto"))
        self.assertIn("local mode", str(e.exception))
        with self.assertRaises(stoker.StokerError) as e:  # local mode starts its own: not someone else's
            self.open(local_dir=self.work).open()
        self.assertEqual(e.exception.code, _capi.INVALID_ARGUMENT)
        self.assertIn("local_dir", str(e.exception))
        with self.assertRaises(stoker.StokerError) as e:
            self.open(local_bin_dir=self.work).open()
        self.assertEqual(e.exception.code, _capi.NOT_FOUND)
        self.assertIn("stoker-coordinator", str(e.exception))
        with self.assertRaises(stoker.StokerError) as e:
            self.open(manifest=os.path.join(self.work, "missing.stoker")).open()
        self.assertIn("missing.stoker", str(e.exception))


if __name__ == "__main__":
    support.run_tests(sys.modules[__name__])
