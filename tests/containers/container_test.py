#!/usr/bin/python3
"""The container test (ctest -L containers): stoker's images built for real by a Docker engine, checked against
the Helm chart, and run as a cluster of containers through faults. Phases, each timed:

  engine   Debian's dockerd, started by this test with its own data-root and socket (engine.py), and stopped by its
           pid at the end, whatever happens; every container, network and volume the test made is removed first.
  base     debian:bookworm-slim made with debootstrap from the mirror apt uses (docker/make-base-image.sh): no
           registry is reachable.
  images   the CPU images from docker/Dockerfile (docker/build-images.sh). --binaries prebuilt (CI's default): the
           binaries compiled once on the host (docker/build-binaries.sh: Release, JPEG only, a unity build to
           compile faster) and copied in, and the imgcodecs worker from the build under test (--bin); --binaries
           source: compiled inside the images, as a release build does (about 3.5 minutes more on 2 cores).
  check    docker/check_images.py against the built images.
  cluster  the chart's coordinator, workers and training ranks as containers, faults included (cluster.py).

  tests/containers/container_test.py [--bin build/bin] [--helm .tools/helm/helm] [--work build/containers]
                                     [--binaries prebuilt|source] [--keep-engine-data] [--summary-json FILE]
A developer can skip it with STOKER_SKIP_CONTAINERS=1 (reported as skipped, exit 77); without that, a machine with
no usable engine (no docker.io, not root) fails it.
"""
import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
import cluster  # noqa: E402
import engine as engine_module  # noqa: E402
import rendered_chart  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
SKIPPED = 77  # CTest's SKIP_RETURN_CODE for this test
BASE_IMAGE = "debian:bookworm-slim"


class Interrupted(Exception):
    pass


def on_signal(signum, _frame):
    signal.alarm(0)
    raise Interrupted("deadline reached" if signum == signal.SIGALRM else f"signal {signum}")


class ContainerTest:
    def __init__(self, args):
        self.args = args
        self.work = pathlib.Path(args.work).resolve()
        self.work.mkdir(parents=True, exist_ok=True)
        self.t0 = time.monotonic()
        self.timings = {}
        self.images = {}

    def say(self, text):
        print(f"[{time.monotonic() - self.t0:6.1f}s] {text}", flush=True)

    def phase(self, name, fn):
        started = time.monotonic()
        self.say(f"== {name}")
        result = fn()
        self.timings[name] = round(time.monotonic() - started, 1)
        self.say(f"== {name} done in {self.timings[name]} s")
        return result

    def script(self, *argv, log=None, timeout=1200, env=None):
        """A repository script against the test's engine (`env`: more variables for it). Its output goes to the
        test's log, or to `log` (a file in the working directory) with only its tail shown if it fails."""
        env = {**self.engine.env(), "STOKER_IMAGE_LOGS": str(self.work), **(env or {})}
        out = subprocess.run([str(a) for a in argv], env=env, cwd=REPO, timeout=timeout, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if log is None:
            print(out.stdout.rstrip(), flush=True)
        else:
            (self.work / log).write_text(out.stdout)
            if out.returncode != 0:
                print("\n".join(out.stdout.splitlines()[-40:]), flush=True)
        if out.returncode != 0:
            raise engine_module.EngineError(f"{argv[0]} exited {out.returncode}" + (f" (log: {self.work / log})"
                                                                                   if log else ""))
        return out.stdout

    def base(self):
        have = self.engine.docker("image", "inspect", BASE_IMAGE, check=False, capture=True).returncode == 0
        if have and self.args.keep_engine_data:
            self.say(f"{BASE_IMAGE} kept from an earlier run (--keep-engine-data)")
            return
        self.script(REPO / "docker/make-base-image.sh", BASE_IMAGE)

    def build_images(self):
        main_build = pathlib.Path(self.args.bin).resolve().parent
        if self.args.binaries == "prebuilt":
            image_build = self.work / "image-build"
            started = time.monotonic()
            self.script(REPO / "docker/build-binaries.sh", image_build, log="image-build.log",
                        env={"STOKER_UNITY_BUILD": "ON"})
            self.timings["compile"] = round(time.monotonic() - started, 1)
            self.say(f"compiled the images' binaries in {image_build} in {self.timings['compile']} s "
                     f"(log: {self.work / 'image-build.log'})")
            out = self.script(REPO / "docker/build-images.sh", "--prebuilt", image_build)
            cache = (main_build / "CMakeCache.txt").read_text()
            if "STOKER_WITH_IMGCODECS:BOOL=ON" not in cache:
                raise engine_module.EngineError(f"{main_build} is built without imgcodecs: no imgcodecs worker")
            out += self.script(REPO / "docker/build-images.sh", "--prebuilt", main_build, "--only", "worker")
        else:
            out = self.script(REPO / "docker/build-images.sh")
            out += self.script(REPO / "docker/build-images.sh", "--imgcodecs", "--only", "worker")
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[2] == "MB":
                self.images[parts[0]] = int(parts[1])

    def check_images(self):
        self.script("/usr/bin/python3", REPO / "docker/check_images.py", "coordinator", "worker", "worker-imgcodecs",
                    "trainer")

    def run_cluster(self):
        trainer = next(tag for tag in self.images if "stoker-trainer:" in tag)
        self.cluster = cluster.Cluster(self.engine, self.work, self.args.helm, pathlib.Path(self.args.bin) / "stoker",
                                       trainer, self.say)
        try:
            return self.cluster.run()
        except Exception:
            self.cluster.dump()
            raise

    def run(self):
        summary = {"ok": False}
        with engine_module.Engine(self.work, self.say, keep_data=self.args.keep_engine_data) as self.engine:
            try:
                self.timings["engine"] = round(time.monotonic() - self.t0, 1)
                self.phase("base", self.base)
                self.phase("images", self.build_images)
                self.phase("check", self.check_images)
                summary = self.phase("cluster", self.run_cluster)
            finally:
                left = self.engine.remove_labelled(cluster.LABEL)
                if left:
                    raise engine_module.EngineError(f"could not remove {left}")
                self.say("removed every container, network and volume of the test")
        summary.update({"images_mb": self.images, "phase_seconds": self.timings,
                        "total_seconds": round(time.monotonic() - self.t0, 1), "binaries": self.args.binaries})
        return summary


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", default=str(REPO / "build" / "bin"), help="the build under test (its `stoker` checks)")
    p.add_argument("--helm", default=str(REPO / ".tools" / "helm" / "helm"))
    p.add_argument("--work", default=str(REPO / "build" / "containers"))
    p.add_argument("--binaries", choices=("prebuilt", "source"), default="prebuilt")
    p.add_argument("--keep-engine-data", action="store_true",
                   help="keep the engine's data-root (images, build cache) for a faster next run")
    p.add_argument("--summary-json")
    p.add_argument("--deadline-s", type=int, default=1380,
                   help="give up after this long, still stopping the engine (CTest's timeout is longer)")
    args = p.parse_args()
    if os.environ.get("STOKER_SKIP_CONTAINERS") == "1":
        print("SKIPPED: STOKER_SKIP_CONTAINERS=1 (the container test builds images and runs a Docker engine)")
        return SKIPPED
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM):
        signal.signal(s, on_signal)
    signal.alarm(args.deadline_s)  # SIGALRM: the deadline, handled like a signal from outside
    test = ContainerTest(args)
    try:
        summary = test.run()
    except (engine_module.EngineError, cluster.ClusterFailure, rendered_chart.ChartError, Interrupted,
            subprocess.TimeoutExpired) as e:
        test.say(f"FAILED: {e}")
        return 1
    times = ", ".join(f"{k} {v} s" for k, v in summary["phase_seconds"].items())
    test.say(f"passed: {summary['epochs']} epochs exact through {len(summary['faults'])} faults; "
             f"batches per rank {summary['batches_per_rank']}; {times}; total {summary['total_seconds']} s")
    if args.summary_json:
        pathlib.Path(args.summary_json).write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
