"""stoker as a cluster of containers, faults between them included: the Helm chart's coordinator StatefulSet,
worker Deployment and example training Job, rendered by helm (tests/containers/cluster-values.yaml) and run as
containers on a user-defined bridge network with the chart's security settings (chart_containers.py).

One job of several epochs; in each of the first ones a fault, through the engine, across real container addresses:
  1. a worker killed (SIGKILL), and a replacement started as the Deployment would;
  2. a worker paused (cgroup freezer) past its lease, then resumed: it must register again;
  3. a worker cut off the network and reconnected at the same address;
  4. the coordinator killed, and a new container started on its journal volume;
  5. workers scaled 3 -> 6 (each new one must deliver);
  6. workers scaled 6 -> 2 by SIGTERM (each must drain and exit 0 within the pod's termination grace period);
and the last epochs on the two workers left.
Each worker fault picks a victim with units in hand (its own stoker_worker_leases) and waits for the coordinator to
see the effect (the worker gone from its /state, then back); the coordinator's restart must replay the journal.
What each fault re-leased and fenced is recorded. At the end `stoker check` judges every epoch of both ranks'
delivery logs: every sample exactly once, the same number of batches per rank.
"""
import ipaddress
import json
import pathlib
import shutil
import socket
import struct
import time
import urllib.request

import chart_containers
import rendered_chart

REPO = pathlib.Path(__file__).resolve().parents[2]
VALUES = REPO / "tests" / "containers" / "cluster-values.yaml"
LABEL = "stoker.test=containers"
NETWORK = "stoker-ct"
JOURNAL_VOLUME = "stoker-ct-journal"
IMAGES = 512


class ClusterFailure(RuntimeError):
    pass


def free_subnet():
    """A /24 no route or address of the host overlaps (read from /proc/net/route: no iproute2 needed)."""
    used = []
    for line in pathlib.Path("/proc/net/route").read_text().splitlines()[1:]:
        fields = line.split()
        dest, mask = (socket.inet_ntoa(struct.pack("<L", int(f, 16))) for f in (fields[1], fields[7]))
        if mask != "0.0.0.0":
            used.append(ipaddress.ip_network(f"{dest}/{mask}", strict=False))
    for third in range(231, 256):
        candidate = ipaddress.ip_network(f"10.{third}.77.0/24")
        if not any(candidate.overlaps(u) for u in used):
            return candidate
    raise ClusterFailure(f"no free 10.x.77.0/24 among the host's routes {used}")


def http_get(ip, port, path, timeout=2.0):
    """(status, body), or None when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://{ip}:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (OSError, ValueError):
        return None


class Cluster:
    def __init__(self, engine, work, helm, stoker, trainer_image, say):
        self.engine, self.helm, self.stoker, self.say = engine, helm, pathlib.Path(stoker), say
        self.trainer_image = trainer_image
        self.work = pathlib.Path(work) / "cluster"
        self.pods = {}          # container name -> PodContainer
        self.must_run = set()   # containers whose exit fails the test at once
        self.notes = set()
        self.faults = []

    # --- setting up -----------------------------------------------------------------------------------------------
    def setup(self):
        if self.work.exists():
            shutil.rmtree(self.work)
        self.dataset, self.out = self.work / "dataset", self.work / "out"
        for d in (self.dataset, self.out):
            d.mkdir(parents=True)
            shutil.chown(d, 65532, 65532)  # the containers' user writes here (what fsGroup does for a volume)
        keys = rendered_chart.keyring_args(self.stoker, self.work / "keys")
        docs, text = rendered_chart.render(self.helm, REPO / "helm" / "stoker", [VALUES], extra_args=keys)
        self.docs = docs
        (self.work / "rendered.yaml").write_text(text)
        self.coordinator = rendered_chart.find(docs, "StatefulSet", "coordinator")
        self.worker = rendered_chart.find(docs, "Deployment", "worker")
        self.job = rendered_chart.find(docs, "Job", "example-job")
        self.job_env = rendered_chart.env_of(self.job)
        self.service_host = rendered_chart.env_of(self.worker)["STOKER_COORDINATOR"].split("://")[1].rsplit(":", 1)[0]
        self.notes.add(f"Service {self.service_host} -> a network alias of the coordinator container")
        left = self.engine.remove_labelled(LABEL)  # an earlier run's, in a kept data-root (--keep-engine-data)
        if left:
            raise ClusterFailure(f"could not remove an earlier run's {left}")
        self.subnet = free_subnet()
        hosts = list(self.subnet.hosts())
        self.address = lambda n: str(hosts[n])
        self.engine.docker("network", "create", "--driver", "bridge", "--subnet", str(self.subnet),
                           "--label", LABEL, NETWORK, capture=True)
        self.engine.docker("volume", "create", "--label", LABEL, JOURNAL_VOLUME, capture=True)
        self.say(f"network {NETWORK} {self.subnet}, volume {JOURNAL_VOLUME}; chart rendered with "
                 f"{VALUES.relative_to(REPO)}")
        self.make_dataset()

    def make_dataset(self):
        """Generated and indexed by the worker image's CLI, as an operator would (docs/operations.md)."""
        probe = chart_containers.PodContainer(self.worker, "dataset", "", {})
        security = probe.security_args()
        for argv in (["gen-dataset", "/data", "--images", str(IMAGES), "--threads", "2"],
                     ["index", "/data", "-o", "/data/train.stoker"]):
            out = self.engine.docker("run", "--rm", "--label", LABEL, "--network", "none", *security,
                                     "--tmpfs", "/tmp", "--mount", f"type=bind,src={self.dataset},dst=/data",
                                     "--entrypoint", "stoker", self.worker_image(), *argv, capture=True, timeout=300)
            self.say(f"worker image: stoker {argv[0]}: {out.stdout.strip().splitlines()[-1]}")

    def worker_image(self):
        return rendered_chart.pod_spec(self.worker)["containers"][0]["image"]

    def start(self, pod, aliases=()):
        self.engine.docker("run", "-d", *pod.run_args(NETWORK, LABEL, aliases), capture=True)
        self.pods[pod.name] = pod
        self.must_run.add(pod.name)
        self.notes |= pod.notes

    def projected(self, workload, pod_name):
        """The pod's Secret and ConfigMap volumes (its CURVE key and the trust file) as host directories holding what
        the kubelet would project from the rendered objects, owned by the containers' user, to bind read-only."""
        out = {}
        for v in rendered_chart.pod_spec(workload).get("volumes", []):
            if "secret" in v or "configMap" in v:
                d = pathlib.Path(rendered_chart.project_volume(self.docs, v, self.work / "pods" / pod_name / v["name"]))
                for f in [d, *d.iterdir()]:
                    shutil.chown(f, 65532, 65532)
                out[v["name"]] = ("bind", d)
                self.notes.add(f"{'Secret' if 'secret' in v else 'ConfigMap'} volume {v['name']} -> its projected "
                               "files in a host directory")
        return out

    def coordinator_pod(self):
        name = self.coordinator["metadata"]["name"] + "-0"
        return chart_containers.PodContainer(
            self.coordinator, name, self.address(1),
            {"journal": ("volume", JOURNAL_VOLUME), "tmp": ("tmpfs",), "dataset": ("bind", self.dataset),
             **self.projected(self.coordinator, name)})

    def worker_pod(self, n):
        name = f"{self.worker['metadata']['name']}-{n}"
        return chart_containers.PodContainer(self.worker, name, self.address(10 + n),
                                             {"tmp": ("tmpfs",), "dataset": ("bind", self.dataset),
                                              **self.projected(self.worker, name)})

    def rank_pod(self, rank):
        pod = chart_containers.PodContainer(
            self.job, f"{self.job['metadata']['name']}-{rank}", self.address(100 + rank),
            {"tmp": ("tmpfs",), **self.projected(self.job, f"{self.job['metadata']['name']}-{rank}")},
            index=rank, image=self.trainer_image,
            extra_env={"STOKER_LOG": f"/out/rank-{rank}.batches", "STOKER_SUMMARY_JSON": f"/out/rank-{rank}.json"},
            extra_mounts={"/out": self.out})
        self.notes.add("each rank's delivery log -> /out, a host directory, for `stoker check`")
        return pod

    # --- observing ----------------------------------------------------------------------------------------------
    def state_of(self, name):
        return self.engine.inspect("container", name)["State"]

    def ready(self, name):
        pod = self.pods[name]
        path, port = pod.probe("readinessProbe")
        r = http_get(pod.ip, port, path)
        return r is not None and r[0] == 200

    def coordinator_state(self):
        pod = self.pods[self.coordinator_name]
        r = http_get(pod.ip, pod.probe("readinessProbe")[1], "/state")
        return json.loads(r[1]) if r and r[0] == 200 else None

    def registered_workers(self):
        """{worker id: its entry in the coordinator's /state}, or None while the coordinator does not answer."""
        state = self.coordinator_state()
        return {w["id"]: w for w in state["workers"]} if state else None

    def has_worker(self, name, present):
        workers = self.registered_workers()
        return workers is not None and (name in workers) == present

    def metrics(self, name):
        pod = self.pods[name]
        r = http_get(pod.ip, pod.probe("readinessProbe")[1], "/metrics")
        return r[1].splitlines() if r and r[0] == 200 else []

    def counters(self, name, family, label):
        """{label value: value} of a metric family on container `name`'s /metrics."""
        out = {}
        for line in self.metrics(name):
            if line.startswith(family + "{") and f'{label}="' in line:
                out[line.split(f'{label}="')[1].split('"')[0]] = float(line.rsplit(" ", 1)[1])
        return out

    def gauge(self, name, family):
        """An unlabelled gauge on container `name`'s /metrics, None if it does not answer."""
        for line in self.metrics(name):
            if line.startswith(family + " "):
                return float(line.split()[1])
        return None

    def releases(self):
        """Units the coordinator re-leased since it started, by reason."""
        return self.counters(self.coordinator_name, "stoker_coordinator_releases_total", "reason")

    def released_since(self, before):
        """Units re-leased since `before` (a releases() reading), by reason, those that happened."""
        return {k: int(v - before.get(k, 0)) for k, v in self.releases().items() if v > before.get(k, 0)}

    def batches(self):
        return [len(p.read_text().splitlines()) if p.exists() else 0
                for p in (self.out / f"rank-{r}.batches" for r in range(self.ranks))]

    def epoch(self):
        """The epoch the slowest rank is in."""
        return min(self.batches()) // self.steps

    def wait_for(self, what, condition, timeout):
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            for name in sorted(self.must_run):
                state = self.state_of(name)
                if not state["Running"]:
                    raise ClusterFailure(f"{name} exited with {state['ExitCode']} while waiting for {what}")
            if time.monotonic() > deadline:
                raise ClusterFailure(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.1)

    def wait_ready(self, names, timeout=60):
        for name in names:
            self.wait_for(f"{name} /readyz", lambda n=name: self.ready(n), timeout)

    def victim_holding_leases(self, candidates):
        """The first of `candidates` with a unit in hand (leased and not yet sent, by its own stoker_worker_leases),
        and how many: the fault then catches it mid-unit (the workers are slowed, cluster-values.yaml, so that a
        unit stays in hand for about 0.4 s; whether the fault lands before the unit is sent is recorded, not
        asserted: exactly-once must hold either way)."""
        def holder():
            for name in candidates:
                leases = self.gauge(name, "stoker_worker_leases") or 0
                if leases > 0:
                    return name, int(leases)
            return None
        return self.wait_for(f"one of {', '.join(candidates)} to hold a unit", holder, 60)

    def job_running(self, fault):
        left = [n for n in self.ranks_names if self.state_of(n)["Running"]]
        if len(left) < self.ranks:
            raise ClusterFailure(f"the job ended before fault '{fault}' (epoch {self.epoch()}): it proves nothing; "
                                 "lengthen the job (exampleJob.epochs or holdMs in cluster-values.yaml)")

    def record(self, fault, started, epoch, **details):
        entry = {"fault": fault, "epoch": epoch, "seconds": round(time.monotonic() - started, 1), **details}
        self.faults.append(entry)
        self.say(f"fault '{fault}' in epoch {epoch}, done in {entry['seconds']} s: {json.dumps(details)}")

    # --- the run ------------------------------------------------------------------------------------------------
    def run(self):
        self.setup()
        self.ranks = int(self.job_env["STOKER_RANKS"])
        per_rank = rendered_chart.expected_batches(self.job_env, IMAGES)
        self.steps = per_rank // int(self.job_env["STOKER_EPOCHS"])
        coordinator = self.coordinator_pod()
        self.coordinator_name = coordinator.name
        self.start(coordinator, aliases=[self.service_host])
        self.wait_ready([coordinator.name])
        replicas = int(self.worker["spec"]["replicas"])
        workers = [self.worker_pod(n) for n in range(replicas)]
        for w in workers:
            self.start(w)
        self.wait_ready([w.name for w in workers])
        self.say(f"coordinator {coordinator.ip} and {replicas} workers ready (Deployment replicas {replicas})")
        self.ranks_names = []
        for rank in range(self.ranks):
            pod = self.rank_pod(rank)
            self.start(pod)
            self.ranks_names.append(pod.name)
        self.say(f"{self.ranks} ranks consuming {per_rank} batches each ({self.steps} per epoch) from "
                 f"{self.trainer_image}")

        live = [w.name for w in workers]
        live = self.kill_worker(live, replicas)
        self.pause_worker(live)
        self.disconnect_worker(live)
        self.restart_coordinator(live)
        live = self.scale(live)
        return self.finish(per_rank, live)

    def at_epoch(self, k):
        """Waits until the slowest rank is a quarter into epoch k, so that the fault lands inside it."""
        target = k * self.steps + self.steps // 4
        self.wait_for(f"a quarter into epoch {k}", lambda: min(self.batches()) >= target, 300)

    def kill_worker(self, live, next_n):
        self.at_epoch(0)
        victim, leases = self.victim_holding_leases(live)
        started, epoch, before = time.monotonic(), self.epoch(), self.releases()
        self.must_run.discard(victim)
        self.engine.docker("kill", victim, capture=True)  # SIGKILL
        self.wait_for(f"the coordinator to drop {victim}", lambda: self.has_worker(victim, False), 30)
        replacement = self.worker_pod(next_n)
        self.start(replacement)
        self.wait_ready([replacement.name])
        self.job_running("worker killed")
        self.record("worker killed", started, epoch, victim=victim, units_in_hand=leases,
                    replacement=replacement.name, released=self.released_since(before))
        return [n for n in live if n != victim] + [replacement.name]

    def pause_worker(self, live):
        self.at_epoch(1)
        victim, leases = self.victim_holding_leases(live)
        started, epoch, before = time.monotonic(), self.epoch(), self.releases()
        self.engine.docker("pause", victim, capture=True)
        self.wait_for(f"the coordinator to drop paused {victim} (its lease lost)",
                      lambda: self.has_worker(victim, False), 30)
        paused_for = round(time.monotonic() - started, 1)
        self.engine.docker("unpause", victim, capture=True)
        self.wait_for(f"{victim} to register again", lambda: self.has_worker(victim, True), 30)
        self.job_running("worker paused")
        self.record("worker paused past its lease", started, epoch, victim=victim, units_in_hand=leases,
                    paused_seconds=paused_for, released=self.released_since(before),
                    victim_units=self.counters(victim, "stoker_worker_units_total", "outcome"))

    def disconnect_worker(self, live):
        self.at_epoch(2)
        victim, leases = self.victim_holding_leases(live)
        pod = self.pods[victim]
        started, epoch, before = time.monotonic(), self.epoch(), self.releases()
        self.engine.docker("network", "disconnect", NETWORK, victim, capture=True)
        self.wait_for(f"the coordinator to drop disconnected {victim}", lambda: self.has_worker(victim, False), 30)
        cut_for = round(time.monotonic() - started, 1)
        self.engine.docker("network", "connect", "--ip", pod.ip, NETWORK, victim, capture=True)
        self.wait_for(f"{victim} to register again", lambda: self.has_worker(victim, True), 60)
        self.job_running("worker disconnected")
        self.record("worker cut off the network and reconnected", started, epoch, victim=victim,
                    units_in_hand=leases, disconnected_seconds=cut_for, address=pod.ip,
                    released=self.released_since(before),
                    victim_units=self.counters(victim, "stoker_worker_units_total", "outcome"))

    def restart_coordinator(self, live):
        self.at_epoch(3)
        name = self.coordinator_name
        before = self.wait_for("the coordinator's /state", self.coordinator_state, 30)
        epoch_before = next(j["epoch"] for j in before["jobs"] if j["name"] == self.job_env["STOKER_JOB"])
        started, epoch = time.monotonic(), self.epoch()
        self.must_run.discard(name)
        self.engine.docker("kill", name, capture=True)
        self.engine.docker("rm", name, capture=True)
        self.start(self.coordinator_pod(), aliases=[self.service_host])
        self.wait_ready([name])
        logs = self.engine.docker("logs", name, capture=True)
        log = logs.stdout + logs.stderr
        replayed = [line for line in log.splitlines() if "replayed" in line]
        if not replayed or " replayed 0 records" in replayed[0]:
            raise ClusterFailure(f"the new coordinator did not replay the journal volume: {replayed}")
        state = self.wait_for("the new coordinator's /state", self.coordinator_state, 30)
        job = next((j for j in state["jobs"] if j["name"] == self.job_env["STOKER_JOB"]), None)
        if job is None or job["epoch"] < epoch_before:
            raise ClusterFailure(f"after the restart the job is {job}, it was in epoch {epoch_before}")
        self.wait_for("every worker registered with the new coordinator",
                      lambda: set(live) <= set(self.registered_workers() or {}), 60)
        progress = sum(self.batches())
        self.wait_for("batches after the restart", lambda: sum(self.batches()) > progress, 60)
        self.job_running("coordinator restarted")
        self.record("coordinator killed and started again on its volume", started, epoch,
                    journal=replayed[0].split("] ", 1)[-1])

    def scale(self, live):
        self.at_epoch(4)
        started, epoch, before = time.monotonic(), self.epoch(), self.releases()
        first = max(int(n.rsplit("-", 1)[1]) for n in live) + 1
        new = [self.worker_pod(n) for n in range(first, first + 3)]
        for pod in new:
            self.start(pod)
        self.wait_ready([p.name for p in new])
        grown = live + [p.name for p in new]
        logs = [self.out / f"rank-{r}.batches" for r in range(self.ranks)]
        self.wait_for("every new worker to deliver a batch",
                      lambda: {p.name for p in new} <= rendered_chart.workers_in_logs(logs), 120)
        self.job_running("scale up")
        self.record("workers scaled 3 -> 6", started, epoch, workers=grown, released=self.released_since(before))

        self.at_epoch(5)
        started, epoch, before = time.monotonic(), self.epoch(), self.releases()
        draining = grown[-4:]  # a ReplicaSet scales down its newest pods first
        grace = self.pods[draining[0]].grace_seconds()
        self.must_run -= set(draining)
        self.engine.docker("stop", "-t", str(grace), *draining, capture=True, timeout=grace + 60)
        codes = {n: self.state_of(n)["ExitCode"] for n in draining}
        if any(codes.values()):
            raise ClusterFailure(f"drained workers exited {codes} (SIGTERM must drain and exit 0 within {grace} s)")
        self.job_running("scale down")
        self.record("workers scaled 6 -> 2 (SIGTERM drains)", started, epoch, drained=codes, grace_seconds=grace,
                    left=grown[:-4], released=self.released_since(before))
        return grown[:-4]

    def finish(self, per_rank, live):
        self.must_run -= set(self.ranks_names)
        self.wait_for("both ranks to finish", lambda: not any(self.state_of(n)["Running"] for n in self.ranks_names),
                      600)
        codes = {n: self.state_of(n)["ExitCode"] for n in self.ranks_names}
        if any(codes.values()):
            raise ClusterFailure(f"ranks exited {codes}")
        logs = [self.out / f"rank-{r}.batches" for r in range(self.ranks)]
        output, summary = rendered_chart.check(self.stoker, self.dataset / "train.stoker", self.job_env, logs)
        print(output, flush=True)
        summary["faults"] = self.faults
        summary["clients"] = [json.loads((self.out / f"rank-{r}.json").read_text()) for r in range(self.ranks)]
        summary["workers_left"] = live
        summary["mappings"] = sorted(self.notes)
        print("chart settings as docker applies them:\n  " + "\n  ".join(sorted(self.notes)), flush=True)
        if not summary["ok"] or summary["batches_per_rank"] != [per_rank] * self.ranks:
            raise ClusterFailure(f"the checker failed: {summary['lost']} lost, {summary['duplicates']} duplicated, "
                                 f"batches per rank {summary['batches_per_rank']} (want {per_rank} each)")
        return summary

    def dump(self):
        """On failure: what each container said last, and the coordinator's state."""
        for name in self.pods:
            out = self.engine.docker("logs", "--tail", "12", name, capture=True, check=False)
            print(f"--- {name}\n{(out.stdout + out.stderr).strip()}")
        if self.coordinator_name_known():
            print(f"--- coordinator /state\n{json.dumps(self.coordinator_state())[:3000]}")

    def coordinator_name_known(self):
        return getattr(self, "coordinator_name", None) in self.pods
