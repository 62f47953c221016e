#!/usr/bin/python3
"""Live shape changes with real processes: a coordinator and two workers on loopback, and one Python process per
rank, each a stoker.Loader driven step by step over its stdin, as a fault-tolerant trainer's replica groups step
together (the driver plays their quorum: it decides the point every survivor resumes from). Proves:

  - a rank killed mid-epoch (its session still held: the coordinator's client timeout is two minutes) does not hold
    the others up: the survivors' Loader.reshape() re-plans the job at the agreed point at once, without restarting;
  - two ranks added later (new processes given the survivors' state) and another batch size;
  - a worker killed during the change (one survivor has joined the new shape, two have not);
  - `stoker check` over every rank's delivery log: each epoch's samples exactly once (at most the remainder not
    delivered), every rank of a shape the same number of steps;
  - a rank left out of the change that lives on is told at its next heartbeat: its Loader raises, naming the
    job's new shape, instead of waiting for batches of the old plan.

    PYTHONPATH=build/python /usr/bin/python3 python/tests/elastic_test.py --bin-dir build/bin
"""
import json
import os
import select
import subprocess
import sys
import unittest

import support

BIN = None
SERVER_ENV = None
IMAGES = 96
ANSWER_DEADLINE_S = 90

# One rank: opens its Loader, then answers one command a line with one JSON line.
RANK = r"""
import json, sys, stoker
spec = json.loads(sys.argv[1])
loader = stoker.Loader(spec.pop("coordinator"), **spec)
for line in sys.stdin:
    cmd = json.loads(line)
    try:
        if cmd["do"] == "step":
            b = loader.next()
            out = {"end": True} if b is None else {"epoch": b.epoch, "index": b.index, "n": len(b.sample_ids)}
        elif cmd["do"] == "state":
            out = loader.state_dict()
        elif cmd["do"] == "reshape":
            loader.reshape(cmd["rank"], cmd["ranks"], batch_size=cmd.get("batch_size"), state=cmd.get("state"))
            out = {"rank": loader.rank, "ranks": loader.ranks, "len": len(loader)}
        elif cmd["do"] == "close":
            loader.close()
            out = {"closed": True}
    except stoker.StokerError as e:
        out = {"code": e.code, "message": str(e)}
    print(json.dumps(out), flush=True)
"""


class Rank:
    """A rank's process; ask() sends one command and returns its JSON answer."""

    def __init__(self, spec, rank):
        self.proc = subprocess.Popen([sys.executable, "-c", RANK, json.dumps(dict(spec, rank=rank))],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        # The Loader's own timeouts (60 s a batch, 10 s to connect) come first; this one catches a hung process.
        ready, _, _ = select.select([self.proc.stdout], [], [], ANSWER_DEADLINE_S)
        if not ready:
            self.proc.kill()
            raise AssertionError(f"no answer to {cmd['do']} within {ANSWER_DEADLINE_S} s")
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the rank's process ended ({self.proc.wait(timeout=30)})")
        return json.loads(line)

    def end(self):
        if self.proc.poll() is None:
            self.ask(do="close")
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


class ElasticTest(unittest.TestCase):
    def setUp(self):
        # A departed rank's session is held two minutes: a change that waited for it would fail the claim below.
        self.cluster = support.Cluster(BIN, IMAGES, coordinator_flags=["--client-timeout=120s"],
                                       server_env=SERVER_ENV)
        self.ranks = []

    def tearDown(self):
        for r in self.ranks:
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait(timeout=30)
            for pipe in (r.proc.stdin, r.proc.stdout):
                if not pipe.closed:
                    pipe.close()
        self.cluster.stop()

    def spec(self, ranks, batch_size):
        return dict(coordinator=self.cluster.endpoint, job="live", manifest=self.cluster.manifest,
                    batch_size=batch_size, ranks=ranks, epochs=2, seed=11, image_height=32, image_width=32,
                    device=-1, framework="numpy", timeout=60, claim_timeout=1, connect_timeout="10s",
                    delivery_log=os.path.join(self.cluster.work, "rank{rank}-%d.log" % len(self.ranks)))

    def start(self, ranks, batch_size, rank):
        r = Rank(self.spec(ranks, batch_size), rank)
        self.ranks.append(r)
        return r

    def step_all(self, group, steps):
        """`steps` lockstep steps of every rank in `group`: the same batch index everywhere, or all at the end."""
        for _ in range(steps):
            taken = [r.ask(do="step") for r in group]
            for t in taken:
                self.assertNotIn("code", t, t)
            self.assertEqual(len({json.dumps(t, sort_keys=True) for t in taken}), 1, f"ranks out of step: {taken}")

    def reshape(self, group, ranks, batch_size, state):
        for new_rank, r in enumerate(group):
            answer = r.ask(do="reshape", rank=new_rank, ranks=ranks, batch_size=batch_size, state=state)
            self.assertEqual(answer.get("ranks"), ranks, answer)

    def test_a_rank_killed_mid_epoch_then_two_added_live_every_sample_exactly_once(self):
        # 4 ranks x 4: 16 a step, 6 steps an epoch. Two steps (32 samples of epoch 0), then rank 3 dies.
        group = [self.start(4, 4, r) for r in range(4)]
        self.step_all(group, 2)
        group[3].proc.kill()
        group[3].proc.wait(timeout=30)
        group = group[:3]

        # The survivors agree on the point after step 2 and go on as 3 x 4 (12 a step): the 64 left are 5 steps.
        state = group[0].ask(do="state")
        self.assertEqual((state["epoch"], state["offset"]), (0, 32))
        self.reshape(group[:1], 3, 4, state)
        self.cluster.procs[1].kill()  # a worker dies during the change: one survivor has joined, two have not
        for new_rank in (1, 2):
            answer = group[new_rank].ask(do="reshape", rank=new_rank, ranks=3, batch_size=4, state=state)
            self.assertEqual(answer.get("ranks"), 3, answer)
        self.step_all(group, 2)

        # Two ranks join (new processes, given the survivors' state) and every rank takes 2 a step: 5 x 2.
        state = group[0].ask(do="state")
        self.assertEqual((state["epoch"], state["offset"]), (0, 56))
        self.reshape(group, 5, 2, state)
        for new_rank in (3, 4):
            joined = self.start(5, 2, new_rank)
            answer = joined.ask(do="reshape", rank=new_rank, ranks=5, batch_size=2, state=state)
            self.assertEqual(answer.get("ranks"), 5, answer)
            group.append(joined)
        # The 40 left of epoch 0 are 4 steps; epoch 1 is 9 steps (6 dropped); each epoch ends at every rank at once.
        for steps in (4, 9):
            self.step_all(group, steps)
            self.assertEqual([r.ask(do="step") for r in group], [{"end": True}] * 5)
        for r in group:
            r.end()

        logs = [os.path.join(self.cluster.work, f) for f in sorted(os.listdir(self.cluster.work))
                if f.startswith("rank") and f.endswith(".log")]
        self.assertEqual(len(logs), 6)  # four first ranks, two joined
        code, out = self.cluster.check(logs, ranks=4, batch_size=4, epochs=2, seed=11)
        self.assertEqual(code, 0, out)
        self.assertIn("ok   epoch 0: planned 96 (+0 remainder", out)
        self.assertIn("ok   epoch 1: planned 90 (+6 remainder", out)
        self.assertIn("4x4 [2 2 2 2]", out)
        self.assertIn("3x4@0+32 [2 2 2]", out)
        self.assertIn("5x2@0+56 [4 4 4 4 4]", out)
        state = self.cluster.state()
        job = next(j for j in state["jobs"] if j["name"] == "live")
        self.assertEqual((job["shape"]["ranks"], job["shape"]["batch_size"], job["shape"]["changes"]), (5, 2, 2))

    def test_a_departed_ranks_client_cannot_go_on_in_the_old_shape(self):
        group = [self.start(2, 4, r) for r in range(2)]
        self.step_all(group, 1)
        state = group[0].ask(do="state")
        answer = group[0].ask(do="reshape", rank=0, ranks=1, batch_size=8, state=state)
        self.assertEqual(answer.get("ranks"), 1, answer)
        # Rank 1 did not leave: its session was ended, and the Loader says why instead of taking a batch.
        refused = None
        for _ in range(100):  # its window may still hold batches of the old plan it received before
            refused = group[1].ask(do="step")
            if "code" in refused:
                break
        self.assertIn("code", refused, "the old shape's client kept delivering")
        self.assertIn("changed shape", refused["message"])

    def test_what_cannot_change_shape_is_refused_before_anything_changes(self):
        import stoker
        spec = self.spec(2, 4)
        spec.pop("delivery_log")
        loader = stoker.Loader(spec.pop("coordinator"), **spec, rank=0)
        with self.assertRaises(ValueError):  # never connected: from which point?
            loader.reshape(0, 1)
        with self.assertRaises(ValueError):
            loader.reshape(2, 2)
        grouped = stoker.Loader(self.cluster.endpoint, **dict(spec, agreement=("00" * 128, 2, 0)), rank=0)
        with self.assertRaises(stoker.StokerError) as refused:
            grouped.reshape(0, 1, state={})
        self.assertIn("agreement or tensor-parallel group", str(refused.exception))
        loader.close()
        grouped.close()


if __name__ == "__main__":
    support.run_tests(sys.modules[__name__])
