#!/usr/bin/python3
"""The Python package with real PyTorch (Debian's CPU build in CI) against real processes: a coordinator and two
workers on loopback and a generated tar dataset. Proves:

  - the host path yields torch tensors equal to the numpy reference (float32 NCHW exactly, bfloat16 channels_last
    bit for bit), labels as int64 tensors;
  - examples/train_ddp.py under torchrun, two processes, DDP over gloo, a small torchvision model: both ranks take
    the same number of steps and end with the same weights; stopped after a mid-epoch checkpoint (the steps after
    it lost, as in a crash) and resumed in new processes from rank 0's loader state, every planned sample is
    trained on exactly once (`stoker check` on the delivery logs);
  - examples/train_lightning.py the same way through Lightning's own checkpointing — where Lightning is installed
    (Debian has none: in CI this test is skipped, and it runs on the GPU machine, bench/gpu_machine.sh lightning).

    PYTHONPATH=build/python /usr/bin/python3 python/tests/torch_test.py --bin-dir build/bin
"""
import os
import sys
import tempfile
import unittest

import numpy as np

import support

try:
    import torch
except ImportError:
    torch = None

BIN = None
SERVER_ENV = None
IMAGES = 96
BATCH = 8
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")


def torchrun(ranks=2):
    """torchrun's command. PyTorch 1.13 (Debian 12's) on Python 3.11 cannot parse its own default --redirects and
    --tee ("0": IntFlag no longer iterates its zero member) and fails before starting anyone; a mapping for a local
    rank that does not exist means the same "nothing redirected" and parses."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
    from torch.distributed.elastic.multiprocessing.api import Std
    if Std.from_str("0") is None:
        command += ["--redirects=9:1", "--tee=9:1"]
    return command


def lightning_missing():
    for name in ("lightning", "pytorch_lightning"):
        try:
            __import__(name)
            return None
        except ImportError:
            pass
    return "neither lightning nor pytorch_lightning is importable (Debian packages neither)"


@unittest.skipIf(torch is None, "no PyTorch (Debian: python3-torch)")
class TorchTest(unittest.TestCase):
    cluster = None
    jobs = 0

    @classmethod
    def setUpClass(cls):
        cls.cluster = support.Cluster(BIN, IMAGES, server_env=SERVER_ENV)

    @classmethod
    def tearDownClass(cls):
        if cls.cluster:
            cls.cluster.stop()

    def job_name(self):
        TorchTest.jobs += 1
        return f"torch{TorchTest.jobs}"

    def example_args(self, script, epochs, *more):
        """An example script's command line against the cluster, for a new job: seed 5, 32-pixel images, ResNet-18."""
        return [os.path.join(EXAMPLES, script), f"--coordinator={self.cluster.endpoint}", f"--job={self.job_name()}",
                f"--manifest={self.cluster.manifest}", f"--epochs={epochs}", "--seed=5", "--image-size=32",
                "--model=resnet18", "--classes=10", *more]

    def test_host_path_yields_torch_tensors(self):
        import stoker
        common = dict(manifest=self.cluster.manifest, batch_size=BATCH, epochs=1, seed=3, image_height=32,
                      image_width=32, device=-1, timeout=60)
        with stoker.Loader(self.cluster.endpoint, self.job_name(), **common) as loader:  # framework: torch
            n = 0
            for batch in loader.batches():
                self.assertIsInstance(batch.images, torch.Tensor)
                self.assertEqual(batch.images.device.type, "cpu")
                self.assertEqual(batch.images.dtype, torch.float32)
                self.assertEqual(tuple(batch.images.shape), (BATCH, 3, 32, 32))
                expected = support.reference_float32(batch.pixels).transpose(0, 3, 1, 2)
                self.assertTrue(torch.equal(batch.images, torch.from_numpy(np.ascontiguousarray(expected))))
                self.assertEqual(batch.labels.dtype, torch.int64)
                self.assertTrue(torch.equal(batch.labels, torch.from_numpy(batch.host_labels)))
                n += 1
            self.assertEqual(n, len(loader))
        with stoker.Loader(self.cluster.endpoint, self.job_name(), dtype="bfloat16", layout="nhwc",
                           **common) as loader:
            batch = loader.next()
            self.assertEqual(batch.images.dtype, torch.bfloat16)
            self.assertTrue(batch.images.is_contiguous(memory_format=torch.channels_last))
            expected = support.bfloat16_bits(support.reference_float32(batch.pixels))
            got = batch.images.permute(0, 2, 3, 1).contiguous().view(torch.int16).numpy().view(np.uint16)
            np.testing.assert_array_equal(got, expected)

    def resume(self, launcher, script, ranks, checkpoint_every, stop_after, epochs):
        work = tempfile.mkdtemp(prefix="resume-", dir=self.cluster.work)
        args = self.example_args(script, epochs, f"--batch-size={BATCH}")
        env = dict(os.environ, OMP_NUM_THREADS="1")  # two trainers and two workers share two cores
        return support.train_and_resume(self.cluster, launcher, args, ranks, checkpoint_every, stop_after, work,
                                        env=env, batch_size=BATCH, epochs=epochs, seed=5)

    def test_ddp_under_torchrun_two_ranks_resumed_from_a_mid_epoch_checkpoint(self):
        steps = IMAGES // (2 * BATCH)  # per epoch and rank
        result = self.resume(torchrun(), "train_ddp.py", ranks=2, checkpoint_every=steps + 2, stop_after=steps + 4,
                             epochs=2)
        state = result["state"]
        self.assertEqual((state["epoch"], state["batches_in_epoch"], state["rank"], state["ranks"]), (1, 2, 0, 2))
        for run, taken, per_epoch in (("first", steps + 4, {"0": steps, "1": 4}),
                                      ("second", steps - 2, {"1": steps - 2})):
            summaries = result[run]
            for s in summaries:
                self.assertEqual(s["len"], steps)
                self.assertEqual(s["steps"], taken, f"{run} run, rank {s['rank']}")
                self.assertEqual(s["steps_per_epoch"], per_epoch, f"{run} run, rank {s['rank']}")
            # DDP averaged every step's gradients: both ranks hold the same weights.
            self.assertAlmostEqual(summaries[0]["weights_sum"], summaries[1]["weights_sum"], places=6)
        self.assertEqual(result["check"].count("ok "), 2, result["check"])

    def test_ddp_resumed_on_fewer_then_more_ranks_with_another_batch_size(self):
        # 4 ranks x 4 (6 steps an epoch) checkpoint at step 2 (32 samples of epoch 0) and run on; 3 ranks x 4 resume
        # there (the 64 left are 5 steps, numbered 3..7), checkpoint at 5 (56 samples) and run on; 6 ranks x 2
        # resume there (40 left: 3 steps, 4 dropped) and run to the end of epoch 1.
        work = tempfile.mkdtemp(prefix="elastic-", dir=self.cluster.work)
        args = self.example_args("train_ddp.py", 2)
        env = dict(os.environ, OMP_NUM_THREADS="1")
        stages = [dict(ranks=4, batch_size=4, checkpoint_every=2, stop_after=3, resume_at=2),
                  dict(ranks=3, batch_size=4, checkpoint_every=5, stop_after=3, resume_at=5),
                  dict(ranks=6, batch_size=2)]
        result = support.train_in_stages(self.cluster, torchrun, args, stages, work, env=env, ranks=4, batch_size=4,
                                         epochs=2, seed=5)
        self.assertEqual([(s["epoch"], s["offset"], s["ranks"]) for s in result["states"]], [(0, 32, 4), (0, 56, 3)])
        for summaries, steps in zip(result["runs"], (3, 3, 3 + 8)):
            self.assertEqual([s["steps"] for s in summaries], [steps] * len(summaries), "equal steps per rank")
            sums = [s["weights_sum"] for s in summaries]
            self.assertLess(max(sums) - min(sums), 1e-6, "DDP kept the ranks' weights the same")
        self.assertEqual(result["runs"][2][0]["steps_per_epoch"], {"0": 3, "1": 8})
        self.assertIn("ok   epoch 0: planned 92 (+4 remainder", result["check"])
        self.assertIn("ok   epoch 1: planned 96 (+0 remainder", result["check"])
        self.assertIn("4x4 [2 2 2 2]", result["check"])

    @unittest.skipIf(lightning_missing(), lightning_missing())
    def test_lightning_resumed_on_one_device_fewer(self):
        # Two devices x 8 (6 steps an epoch) checkpoint at global step 2 (32 samples) and run on; one device x 8 (12
        # steps an epoch) resumes there through Lightning's own checkpoint (len() asked before the state is given
        # back): the 64 samples left are 8 steps, then epoch 1 whole.
        work = tempfile.mkdtemp(prefix="lightning-elastic-", dir=self.cluster.work)
        args = self.example_args("train_lightning.py", 2)
        env = dict(os.environ, OMP_NUM_THREADS="1")
        stages = [dict(ranks=2, batch_size=BATCH, checkpoint_every=2, stop_after=3, resume_at=2, args=["--devices=2"]),
                  dict(ranks=1, batch_size=BATCH, args=["--devices=1"])]
        result = support.train_in_stages(self.cluster, lambda ranks: [sys.executable], args, stages, work, env=env,
                                         ranks=2, batch_size=BATCH, epochs=2, seed=5)
        self.assertEqual((result["states"][0]["offset"], result["states"][0]["ranks"]), (32, 2))
        self.assertEqual(result["runs"][1][0]["steps"], 8 + IMAGES // BATCH)
        self.assertIn("ok   epoch 0: planned 96 (+0 remainder", result["check"])

    @unittest.skipIf(lightning_missing(), lightning_missing())
    def test_lightning_resumed_through_its_own_checkpoints(self):
        steps = IMAGES // BATCH
        result = self.resume([sys.executable], "train_lightning.py", ranks=1, checkpoint_every=steps + 3,
                             stop_after=steps + 6, epochs=2)
        self.assertEqual((result["state"]["epoch"], result["state"]["batches_in_epoch"]), (1, 3))
        self.assertEqual(result["first"][0]["steps"], steps + 6)
        self.assertEqual(result["second"][0]["steps"], steps - 3)
        self.assertEqual(result["first"][0]["len"], steps)


if __name__ == "__main__":
    support.run_tests(sys.modules[__name__])
