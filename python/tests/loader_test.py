#!/usr/bin/python3
"""The Python package against real processes: a coordinator and two workers on loopback, a generated tar dataset,
and stoker.Loader in this process (through libstoker_c.so). Proves, on the host path (CI has no GPU):

  - two ranks over two epochs: every sample exactly once per epoch, the same number of batches per rank;
  - the output equals a numpy reference built from the received pixels: float32 NCHW exactly, bfloat16 NHWC
    bit for bit (round to nearest even);
  - a batch's memory goes back when its last array is freed; holding `depth` batches is a clear error, not a hang;
  - checkpoint and resume in a new Loader: the epoch still delivers every sample once;
  - as a DataLoader: len() is the epoch's steps; a `for` after exactly len() batches starts the next epoch;
    state_dict() mid-epoch, pickled, given to a new Loader after len() (Lightning's order) resumes exactly the
    batches not taken (the checker on the delivery logs); rank 0's state resumes rank 1 at the same position;
    set_epoch() (Lightning's call at each epoch's start) moves a rank that is elsewhere to that epoch's start;
  - bad input: an unknown flag, a bad dtype, an unknown job, an unreachable coordinator, a state of another job,
    world size or a damaged one, two processes claiming one rank (their rank from torchrun's RANK): StokerError,
    with its code; a killed process's rank is claimed once the coordinator frees it.
With PyTorch and a GPU (the GPU machine) it also checks CUDA tensors: float32 against the reference, bfloat16
channels_last, labels on the device, the consumer being PyTorch's current stream.

    PYTHONPATH=build/python /usr/bin/python3 python/tests/loader_test.py --bin-dir build/bin
"""
import gc
import itertools
import json
import os
import pickle
import subprocess
import sys
import time
import unittest

import numpy as np

import stoker
import support
from stoker import _capi

BIN = None
SERVER_ENV = None  # the environment of the processes this test starts (--server-lib-dir)
IMAGES = 96
SIZE = 64
reference_float32, bfloat16_bits = support.reference_float32, support.bfloat16_bits


class LoaderTest(unittest.TestCase):
    cluster = manifest = None
    jobs = 0

    @classmethod
    def setUpClass(cls):
        # A short client timeout: a killed process's rank is free again within seconds (the claim test waits for it).
        cls.cluster = support.Cluster(BIN, IMAGES, coordinator_flags=["--client-timeout=5s"], server_env=SERVER_ENV)
        cls.manifest = cls.cluster.manifest

    @classmethod
    def tearDownClass(cls):
        if cls.cluster:
            cls.cluster.stop()

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
                self.assertEqual(stats["samples_quarantined"], 0)
                self.assertEqual(stats["quarantined_by_reason"], {})  # counts by reason: none here
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
        # The coordinator's refusals come when the Loader connects: at its first use, or open().
        unknown = stoker.Loader(self.cluster.endpoint, "no-such-job", attach=True, device=-1, framework="numpy",
                                connect_timeout="10s")
        with self.assertRaises(stoker.StokerError) as e:
            unknown.open()
        self.assertEqual(e.exception.code, _capi.NOT_FOUND, str(e.exception))
        started = time.monotonic()
        unreachable = stoker.Loader("tcp://127.0.0.1:9", **dict(self.job(), connect_timeout="1s"))
        with self.assertRaises(stoker.StokerError) as e:
            len(unreachable)
        self.assertIn(e.exception.code, (_capi.UNAVAILABLE, _capi.DEADLINE_EXCEEDED), str(e.exception))
        self.assertLess(time.monotonic() - started, 30)

    def check_flags(self, spec):
        return {k: spec[k] for k in ("batch_size", "ranks", "epochs", "seed")}

    def test_len_is_the_epoch_and_a_for_after_exactly_len_batches_starts_the_next(self):
        steps = IMAGES // 8
        with self.open(self.job(epochs=2)) as loader:
            self.assertEqual(len(loader), steps)  # connects: the job's plan says it
            # Frameworks that know len() take exactly that many batches and never ask for the epoch's end.
            first = [(b.epoch, b.index) for b in itertools.islice(loader.batches(), len(loader))]
            self.assertEqual(first, [(0, i) for i in range(steps)])
            second = [(b.epoch, b.index) for b in loader.batches()]
            self.assertEqual(second, [(1, i) for i in range(steps)])
            self.assertEqual(list(loader), [])
            self.assertTrue(loader.finished)

    def test_state_dict_mid_epoch_resumes_exactly_the_batches_not_taken(self):
        spec = self.job(epochs=2)
        steps = IMAGES // 8
        first_log = os.path.join(self.cluster.work, "state-first.log")
        second_log = os.path.join(self.cluster.work, "state-second.log")
        loader = self.open(spec, delivery_log=first_log)
        self.assertEqual(sum(1 for _ in loader.batches()), steps)  # epoch 0
        self.assertEqual([(b.epoch, b.index) for b in itertools.islice(loader.batches(), 3)], [(1, 0), (1, 1), (1, 2)])
        state = pickle.loads(pickle.dumps(loader.state_dict()))  # what a checkpoint file holds
        self.assertEqual({k: state[k] for k in ("job", "rank", "ranks", "batch_size", "steps_per_epoch", "position",
                                                "epoch", "batches_in_epoch")},
                         {"job": spec["job"], "rank": 0, "ranks": 1, "batch_size": 8, "steps_per_epoch": steps,
                          "position": steps + 3, "epoch": 1, "batches_in_epoch": 3})
        for _ in range(2):  # taken after the checkpoint: lost in a crash, so the resumed process takes them again
            self.assertIsNotNone(loader.next())
        loader.close()
        with self.open(spec, delivery_log=second_log) as resumed:
            self.assertEqual(len(resumed), steps)  # Lightning's order: len(), then load_state_dict(), then iterate
            resumed.load_state_dict(state)
            rest = [(b.epoch, b.index) for b in resumed.batches()]
            self.assertEqual(rest, [(1, i) for i in range(3, steps)])
            self.assertEqual(list(resumed), [])
            self.assertTrue(resumed.finished)
        code, out = self.cluster.check([support.resumed_logs(first_log, second_log, state)], **self.check_flags(spec))
        self.assertEqual(code, 0, out)
        self.assertEqual(out.count("ok "), 2, out)
        # Uncut, the two batches taken after the checkpoint are there twice: the checker sees what a wrong resume does.
        code, out = self.cluster.check([first_log, second_log], **self.check_flags(spec))
        self.assertNotEqual(code, 0, out)

    def test_set_epoch_moves_the_rank_to_that_epochs_start_unless_it_is_in_it(self):
        steps = IMAGES // 8
        with self.open(self.job(epochs=3)) as loader:
            # Lightning resuming from an epoch-end checkpoint gives no state back, only the epoch it starts.
            loader.sampler.set_epoch(1)
            self.assertEqual(loader.state_dict()["position"], steps)
            self.assertEqual([(b.epoch, b.index) for b in itertools.islice(loader.batches(), 3)],
                             [(1, 0), (1, 1), (1, 2)])
            loader.set_epoch(1)  # in it already, as after a mid-epoch load_state_dict(): nothing moves
            self.assertEqual([b.index for b in loader.batches()], list(range(3, steps)))
            loader.set_epoch(2)  # the epoch the last one ended into: nothing moves either
            self.assertEqual(loader.state_dict()["position"], 2 * steps)
            # A rank the coordinator continued past the checkpoint (its last process ran on) goes back.
            loader.set_epoch(0)
            self.assertEqual([(b.epoch, b.index) for b in loader.batches()], [(0, i) for i in range(steps)])

    def test_a_state_resumes_the_job_on_more_ranks_and_another_batch_size_exactly(self):
        spec = self.job()  # 1 rank x 8
        ids = []
        with self.open(spec) as loader:
            for _ in range(3):
                ids.extend(loader.next().sample_ids.tolist())
            state = loader.state_dict()
        self.assertEqual((state["epoch"], state["offset"]), (0, 24))
        resized = dict(spec, ranks=2, batch_size=4)  # 8 a step, as before, in two ranks
        loaders = [self.open(resized, rank=r) for r in range(2)]
        try:
            for loader in loaders:
                loader.load_state_dict(state)
            self.assertEqual([loader.ranks for loader in loaders], [2, 2])
            indexes = []
            for loader in loaders:
                indexes.append([])
                for b in loader.batches():
                    indexes[-1].append(b.index)
                    ids.extend(b.sample_ids.tolist())
            self.assertEqual(len(indexes[0]), len(indexes[1]), "every rank of the new shape takes the same steps")
            self.assertEqual(indexes[0][0], 3)  # numbered so that the epoch ends where it always does
            self.assertEqual((loaders[0].state_dict()["epoch"], loaders[0].state_dict()["offset"]), (1, 0))  # the end
        finally:
            for loader in loaders:
                loader.close()
        self.assertEqual(len(ids), len(set(ids)), "no sample twice")
        self.assertEqual(len(ids), IMAGES - IMAGES % 8, "every sample but the remainder")

    def test_len_before_load_state_dict_claims_nothing_so_a_state_resumes_on_another_shape(self):
        # Lightning's order: len() first, then load_state_dict(), then iterating.
        spec = self.job(ranks=2, batch_size=4)
        ids = []
        with self.open(spec, rank=0) as rank0, self.open(spec, rank=1) as rank1:
            for _ in range(3):
                for loader in (rank0, rank1):
                    ids.extend(loader.next().sample_ids.tolist())
            state = rank0.state_dict()
        with self.open(dict(spec, ranks=1, batch_size=8)) as resumed:
            self.assertEqual(len(resumed), IMAGES // 8)  # the job still runs as 2 x 4: len() only asked
            resumed.load_state_dict(state)
            self.assertEqual(len(resumed), IMAGES // 8)
            ids.extend(i for b in resumed.batches() for i in b.sample_ids.tolist())
        self.assertEqual(sorted(ids), sorted(set(ids)), "no sample twice")
        self.assertEqual(len(ids), IMAGES, "every sample once")
        # A job that does not exist yet: len() connects, creating it, as before.
        with self.open(self.job()) as fresh:
            self.assertEqual(len(fresh), IMAGES // 8)
            self.assertEqual(fresh.next().index, 0)

    def test_a_state_of_rank_0_resumes_rank_1_at_the_same_position(self):
        spec = self.job(ranks=2)
        steps = IMAGES // 16
        rank0, rank1 = self.open(spec, rank=0), self.open(spec, rank=1)
        ids = []
        for _ in range(2):
            rank0.next()
            ids.extend(rank1.next().sample_ids.tolist())
        state = rank0.state_dict()  # what Lightning saves: rank 0's, given back to every rank
        rank1.close()
        with self.open(spec, rank=1) as resumed:
            resumed.load_state_dict(state)
            self.assertEqual(resumed.state_dict()["rank"], 1)
            self.assertEqual(resumed.state_dict()["position"], 2)
            rest = list(resumed.batches())
            self.assertEqual([b.index for b in rest], list(range(2, steps)))
            ids.extend(i for b in rest for i in b.sample_ids.tolist())
        self.assertEqual(len(ids), steps * 8)
        self.assertEqual(len(set(ids)), steps * 8, "rank 1 got each of its samples once")
        rank0.close()

    def test_a_state_of_another_job_or_a_damaged_one_is_refused_clearly(self):
        spec = self.job()
        with self.open(spec) as loader:
            loader.next()
            state = loader.state_dict()
        other = self.open(self.job())
        with self.assertRaises(stoker.StokerError) as e:
            other.load_state_dict(state)
        self.assertEqual(e.exception.code, _capi.FAILED_PRECONDITION)
        self.assertIn(f"job {spec['job']!r}", str(e.exception))
        other.close()
        # The same job asked for with another seed: refused, naming it.
        resized = self.open(spec, seed=8)
        with self.assertRaises(stoker.StokerError) as e:
            resized.load_state_dict(state)
        self.assertEqual(e.exception.code, _capi.FAILED_PRECONDITION)
        self.assertIn("seed: 8 here, 7 registered", str(e.exception))
        for bad, words in ((dict(state, position=state["position"] + 1), "edited or damaged"),
                           (dict(state, token=state["token"][:-1] + ("1" if state["token"][-1] == "0" else "0")),
                            "damaged"),
                           ({"epoch": 3}, "not a stoker.Loader state")):
            with self.assertRaises(stoker.StokerError) as e:
                resized.load_state_dict(bad)
            self.assertEqual(e.exception.code, _capi.INVALID_ARGUMENT, str(e.exception))
            self.assertIn(words, str(e.exception))
        resized.close()

    def claimant(self, spec, env, then=""):
        """A separate process that opens `spec`'s Loader, its rank from torchrun's variables (env), then runs `then`.
        Prints one JSON line: {"ok": true} or the error's code and message."""
        options = {k: v for k, v in spec.items() if k not in ("rank", "ranks")}
        script = (f"import json, sys, stoker\ntry:\n"
                  f"    loader = stoker.Loader({self.cluster.endpoint!r}, **{options!r}).open()\n"
                  f"    print(json.dumps({{'ok': True}}), flush=True)\n{then}\n"
                  "except stoker.StokerError as e:\n    print(json.dumps({'code': e.code, 'message': str(e)}))\n")
        return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stdin=subprocess.PIPE,
                                text=True, env=dict(os.environ, **env))

    def test_two_processes_claiming_one_rank_is_a_clear_error(self):
        spec = self.job(ranks=2, claim_timeout=1)
        with self.open(spec, rank=1) as holder:
            holder.open()
            second = self.claimant(spec, {"RANK": "1", "WORLD_SIZE": "2"})
            out, _ = second.communicate(timeout=60)
            result = json.loads(out.splitlines()[-1])
            self.assertEqual(result.get("code"), _capi.ALREADY_EXISTS, out)
            self.assertIn("claim rank 1", result["message"])
            first = self.claimant(spec, {"RANK": "0", "WORLD_SIZE": "2"})  # the other rank is free
            out, _ = first.communicate(timeout=60)
            self.assertEqual(json.loads(out.splitlines()[-1]), {"ok": True}, out)

    def test_a_killed_processs_rank_is_claimed_once_the_coordinator_frees_it(self):
        spec = self.job(claim_timeout=30)
        holder = self.claimant(spec, {"RANK": "0", "WORLD_SIZE": "1"},
                               then="    loader.next()\n    print('took', flush=True)\n    sys.stdin.read()")
        try:
            self.assertEqual(json.loads(holder.stdout.readline()), {"ok": True})
            self.assertEqual(holder.stdout.readline().strip(), "took")
        finally:
            holder.kill()  # no close: the coordinator holds the rank for it until the client timeout
            holder.communicate(timeout=30)
        with self.open(spec) as loader:
            self.assertEqual(len(loader), IMAGES // 8)  # waited for the rank, did not fail
            self.assertGreater(sum(1 for _ in loader.batches()), 0)

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


if __name__ == "__main__":
    support.run_tests(sys.modules[__name__])
