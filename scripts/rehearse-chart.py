#!/usr/bin/env python3
"""A local rehearsal of what the Helm chart describes: the same processes, with the flags and environment the
rendered manifests give them, on one machine.

It renders helm/stoker (helm template, tests/deploy/rehearsal-values.yaml), takes the coordinator StatefulSet, the
worker Deployment and the example training Job out of the output, and starts their containers as local processes:
one coordinator, two workers, one client per rank of the Job. While the clients consume, it scales the workers as
the autoscaler would — 2 -> 4 by starting pods, 4 -> 2 by SIGTERM (the kubelet's signal; each must drain and exit 0
within the pod's terminationGracePeriodSeconds) — and at the end `stoker check` compares what every rank received
with the plan: every sample exactly once, every rank the same number of batches.

Only what a pod network and volumes provide is substituted, and every substitution is printed: listen addresses
become loopback port 0 (several workers share one host) with an endpoint file to learn the port, the Service DNS
name becomes the coordinator's loopback endpoint, the pod IP 127.0.0.1, volume mount paths local directories (the
CURVE keys, made with `stoker keygen` and given to helm with --set-file, are projected from the rendered Secrets
and ConfigMap as the kubelet would).
An environment variable the script cannot map (a new valueFrom in a template) stops it with an error.

  scripts/rehearse-chart.py [--helm .tools/helm/helm] [--bin build/bin] [--work DIR] [--summary-json FILE]
"""
import argparse
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import rendered_chart

REPO = pathlib.Path(__file__).resolve().parent.parent
CHART = REPO / "helm" / "stoker"
VALUES = REPO / "tests" / "deploy" / "rehearsal-values.yaml"
# The binary each image runs: its ENTRYPOINT in docker/Dockerfile (docker/check_images.py checks they agree).
# The Job names its command itself.
ENTRYPOINTS = {"coordinator": "stoker-coordinator", "worker": "stoker-worker"}


class Rehearsal:
    def __init__(self, args):
        self.args = args
        self.bin = pathlib.Path(args.bin).resolve()
        self.work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="stoker-rehearsal-")).resolve()
        self.work.mkdir(parents=True, exist_ok=True)
        # A fresh cluster every run (journal, logs, pod directories); only the generated dataset is kept.
        for entry in self.work.iterdir():
            if entry.name != "dataset":
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        self.procs = {}
        self.substitutions = set()
        self.t0 = time.monotonic()

    def say(self, text):
        print(f"[{time.monotonic() - self.t0:6.1f}s] {text}", flush=True)

    def fail(self, text):
        self.say(f"FAILED: {text}")
        for name, (proc, _) in self.procs.items():
            if proc.poll() is None:
                proc.kill()
        for log in sorted(self.work.glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-5:]
            print(f"--- {log.name} (last lines)\n" + "\n".join(tail))
        sys.exit(1)

    # --- the rendered manifests -------------------------------------------------------------------------------
    def render(self):
        try:
            keys = rendered_chart.keyring_args(self.bin / "stoker", self.work / "keys")
            docs, text = rendered_chart.render(self.args.helm, CHART, [VALUES], extra_args=keys)
            self.docs = docs
            (self.work / "rendered.yaml").write_text(text)
            self.coordinator = rendered_chart.find(docs, "StatefulSet", "coordinator")
            self.worker = rendered_chart.find(docs, "Deployment", "worker")
            self.job = rendered_chart.find(docs, "Job", "example-job")
        except rendered_chart.ChartError as e:
            self.fail(str(e))
        self.say(f"rendered {len(docs)} manifests with {VALUES.relative_to(REPO)}; "
                 f"running StatefulSet/{self.coordinator['metadata']['name']}, "
                 f"Deployment/{self.worker['metadata']['name']}, Job/{self.job['metadata']['name']}")

    # --- turning a pod's container into a local process --------------------------------------------------------
    def mounts(self, pod_spec, container, pod_dir):
        """Mount path -> local directory, for the container's volume mounts."""
        volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
        claims = {c["metadata"]["name"] for c in self.coordinator["spec"].get("volumeClaimTemplates", [])}
        out = {}
        for m in container.get("volumeMounts", []):
            v = volumes.get(m["name"], {})
            if "persistentVolumeClaim" in v or "nfs" in v or m["name"] == "dataset":
                local = self.dataset  # the shared, read-only dataset volume
            elif m["name"] in claims or "emptyDir" in v:
                local = pod_dir / m["name"]
                local.mkdir(parents=True, exist_ok=True)
            elif "secret" in v or "configMap" in v:
                try:
                    local = pathlib.Path(rendered_chart.project_volume(self.docs, v, pod_dir / m["name"]))
                except rendered_chart.ChartError as e:
                    self.fail(str(e))
            else:
                self.fail(f"volume {m['name']}: no local stand-in for {sorted(v)}")
            if m["mountPath"] != "/tmp":
                out[m["mountPath"]] = local
                self.substitutions.add(f"volume {m['name']} at {m['mountPath']} -> {local.relative_to(self.work)}")
        return out

    def environment(self, pod, container, pod_name, index, pod_dir, mounts):
        env = {}
        for e in container.get("env", []):
            name, value = e["name"], e.get("value")
            source = e.get("valueFrom")
            if source is not None:
                value = self.value_from(source, container, pod_name, index)
            for mount, local in mounts.items():
                if isinstance(value, str) and value.startswith(mount + "/") or value == mount:
                    value = str(local) + value[len(mount):]
            env[name] = value
        # Pod networking on one host: every listener on loopback port 0, its address read back from a file.
        if "STOKER_LISTEN" in env:
            self.substitutions.add(f"STOKER_LISTEN {env['STOKER_LISTEN']} -> tcp://127.0.0.1:0")
            env["STOKER_LISTEN"] = "tcp://127.0.0.1:0"
            env["STOKER_ENDPOINT_FILE"] = str(pod_dir / "endpoint")
        if "STOKER_METRICS_LISTEN" in env:
            self.substitutions.add(f"STOKER_METRICS_LISTEN {env['STOKER_METRICS_LISTEN']} -> 127.0.0.1:0")
            env["STOKER_METRICS_LISTEN"] = "127.0.0.1:0"
            env["STOKER_METRICS_ADDRESS_FILE"] = str(pod_dir / "metrics-address")
        if "STOKER_COORDINATOR" in env:
            self.substitutions.add(f"STOKER_COORDINATOR {env['STOKER_COORDINATOR']} -> the coordinator's loopback endpoint")
            env["STOKER_COORDINATOR"] = self.coordinator_endpoint
        return env

    def value_from(self, source, container, pod_name, index):
        if source.get("fieldRef", {}).get("fieldPath") == "status.podIP":
            self.substitutions.add("status.podIP -> 127.0.0.1")
        try:
            return rendered_chart.value_from(source, container, pod_name, index, "127.0.0.1")
        except rendered_chart.ChartError as e:
            self.fail(str(e))

    def start(self, workload, pod_name, index=0, extra_env=None):
        pod_spec = workload["spec"]["template"]["spec"]
        container = pod_spec["containers"][0]
        component = workload["metadata"]["labels"]["app.kubernetes.io/component"]
        command = container.get("command") or [ENTRYPOINTS[component]]
        argv = [str(self.bin / command[0])] + command[1:] + container.get("args", [])
        pod_dir = self.work / pod_name
        pod_dir.mkdir(parents=True, exist_ok=True)
        mounts = self.mounts(pod_spec, container, pod_dir)
        # A client names the manifest by its path in the coordinator's and workers' dataset mount.
        mounts.setdefault(self.dataset_mount, self.dataset)
        env = self.environment(workload, container, pod_name, index, pod_dir, mounts)
        env.update(extra_env or {})
        log = open(self.work / f"{pod_name}.log", "w")
        proc = subprocess.Popen(argv, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
                                stdout=log, stderr=subprocess.STDOUT, cwd=pod_dir)
        self.procs[pod_name] = (proc, pod_dir)
        self.say(f"started {pod_name}: {' '.join([command[0]] + argv[1:])} with {len(env)} environment variables")
        return pod_dir

    def wait_for(self, what, condition, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            for name, (proc, _) in self.procs.items():
                if proc.poll() not in (None, 0) and name not in self.stopped:
                    self.fail(f"{name} exited with {proc.returncode} while waiting for {what}")
            time.sleep(0.05)
        self.fail(f"timed out after {timeout}s waiting for {what}")

    def ready(self, pod_name):
        """The pod's readiness probe, as the kubelet would ask it: GET /readyz on its metrics port."""
        address_file = self.procs[pod_name][1] / "metrics-address"
        if not address_file.exists() or not address_file.read_text().strip():
            return False
        path = self.workload_of(pod_name)["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"]
        try:

            with urllib.request.urlopen(f"http://{address_file.read_text().strip()}{path}", timeout=2) as r:
                return r.status == 200
        except Exception:
            return False

    def workload_of(self, pod_name):
        return self.coordinator if "coordinator" in pod_name else self.worker

    def batches(self):
        return sum(len(p.read_text().splitlines()) for p in self.work.glob("rank-*.batches"))

    # --- the run -----------------------------------------------------------------------------------------------
    def run(self):
        self.stopped = set()
        self.render()
        job_env = rendered_chart.env_of(self.job)
        self.dataset = self.work / "dataset"
        self.make_dataset(job_env)

        coordinator_pod = self.coordinator["metadata"]["name"] + "-0"
        pod_dir = self.start(self.coordinator, coordinator_pod)
        self.coordinator_endpoint = self.wait_for(
            "the coordinator's endpoint", lambda: (pod_dir / "endpoint").exists() and (pod_dir / "endpoint").read_text().strip(), 30)
        self.wait_for("the coordinator's /readyz (journal replayed)", lambda: self.ready(coordinator_pod), 30)
        self.say(f"coordinator ready at {self.coordinator_endpoint}")

        replicas = self.worker["spec"].get("replicas", 2)
        workers = [f"{self.worker['metadata']['name']}-{i}" for i in range(4)]
        for name in workers[:replicas]:
            self.start(self.worker, name)
        for name in workers[:replicas]:
            self.wait_for(f"{name} /readyz (registered)", lambda n=name: self.ready(n), 30)
        self.say(f"{replicas} workers ready (Deployment replicas: {replicas})")

        ranks = int(job_env["STOKER_RANKS"])
        clients = []
        for rank in range(ranks):
            name = f"{self.job['metadata']['name']}-{rank}"
            self.start(self.job, name, index=rank, extra_env={
                "STOKER_LOG": str(self.work / f"rank-{rank}.batches"),
                "STOKER_SUMMARY_JSON": str(self.work / f"rank-{rank}.json")})
            clients.append(name)
        per_rank = rendered_chart.expected_batches(job_env, self.args.images)
        total = per_rank * ranks
        self.say(f"{ranks} clients consuming {per_rank} batches each")

        self.wait_for("a quarter of the batches", lambda: self.batches() >= total // 4, 120)
        for name in workers[replicas:4]:
            self.start(self.worker, name)
        for name in workers[replicas:4]:
            self.wait_for(f"{name} /readyz", lambda n=name: self.ready(n), 30)
        self.say(f"scaled up to 4 workers at {self.batches()}/{total} batches")

        self.wait_for("the new workers to deliver", lambda: self.workers_seen() >= set(workers[replicas:4]), 120)
        grace = self.worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        draining = workers[:2]
        self.say(f"scaling down to 2: SIGTERM to {', '.join(draining)} at {self.batches()}/{total} batches "
                 f"(terminationGracePeriodSeconds {grace})")
        for name in draining:
            self.stopped.add(name)
            self.procs[name][0].send_signal(signal.SIGTERM)
        for name in draining:
            try:
                code = self.procs[name][0].wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.fail(f"{name} did not drain within terminationGracePeriodSeconds ({grace}s); the kubelet would kill it")
            if code != 0:
                self.fail(f"{name} exited {code} after SIGTERM (a drained worker exits 0)")
        self.say(f"{' and '.join(draining)} drained and exited 0; 2 workers left")

        for name in clients:
            proc = self.procs[name][0]
            try:
                code = proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                self.fail(f"{name} did not finish")
            if code != 0:
                self.fail(f"{name} exited {code}")
        self.say(f"every rank finished: {self.batches()}/{total} batches")
        summary = self.check(job_env, ranks)
        served_after = self.workers_seen()
        for name in workers:
            proc = self.procs[name][0]
            if proc.poll() is None:
                self.stopped.add(name)
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=grace)
        self.procs[coordinator_pod][0].send_signal(signal.SIGTERM)
        self.procs[coordinator_pod][0].wait(timeout=30)
        summary.update({"workers_started": 4, "workers_drained": len(draining),
                        "drained_exit_codes": [self.procs[n][0].returncode for n in draining],
                        "workers_that_delivered": sorted(served_after), "substitutions": sorted(self.substitutions)})
        print("substitutions made for one host:")
        for s in sorted(self.substitutions):
            print(f"  {s}")
        print(f"summary: {summary['samples_planned']} samples planned, {summary['samples_delivered']} delivered, "
              f"{summary['duplicates']} duplicates, {summary['lost']} lost; batches per rank {summary['batches_per_rank']}; "
              f"workers 2 -> 4 -> 2")
        if self.args.summary_json:
            pathlib.Path(self.args.summary_json).write_text(json.dumps(summary, indent=1) + "\n")
        if not summary["ok"]:
            self.fail("the exactly-once check failed")

    def make_dataset(self, job_env):
        manifest = pathlib.Path(job_env["STOKER_MANIFEST"])
        mount = self.worker["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        mount_path = next(m["mountPath"] for m in mount if m["name"] == "dataset")
        self.dataset_mount = mount_path
        local_manifest = self.dataset / manifest.relative_to(mount_path)
        if not local_manifest.exists():
            self.say(f"generating {self.args.images} images in {self.dataset.relative_to(self.work)}")
            subprocess.run([str(self.bin / "stoker"), "gen-dataset", str(self.dataset), "--images",
                            str(self.args.images)], check=True, capture_output=True)
            subprocess.run([str(self.bin / "stoker"), "index", str(self.dataset), "-o", str(local_manifest)],
                           check=True, capture_output=True)
        self.local_manifest = local_manifest

    def workers_seen(self):
        return rendered_chart.workers_in_logs(self.work.glob("rank-*.batches"))

    def check(self, env, ranks):
        output, summary = rendered_chart.check(self.bin / "stoker", self.local_manifest, env,
                                               [self.work / f"rank-{r}.batches" for r in range(ranks)])
        print(output)
        summary["client_summaries"] = [json.loads((self.work / f"rank-{r}.json").read_text()) for r in range(ranks)]
        return summary


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--helm", default=str(REPO / ".tools" / "helm" / "helm"))
    p.add_argument("--bin", default=str(REPO / "build" / "bin"))
    p.add_argument("--work", help="working directory (default: a new temporary one)")
    p.add_argument("--images", type=int, default=1024)
    p.add_argument("--summary-json")
    Rehearsal(p.parse_args()).run()


if __name__ == "__main__":
    main()
