"""The Helm chart as rendered manifests, and the verdict of `stoker check` on what the training pods received: shared
by the two tools that run what the chart describes, scripts/rehearse-chart.py (as local processes) and
tests/containers/cluster_test.py (as containers on a real Docker engine)."""
import base64
import math
import os
import re
import subprocess

import yaml


class ChartError(RuntimeError):
    pass


def render(helm, chart, values_files, namespace="stoker", release="rel", extra_args=()):
    """(documents, text) of `helm template` with these values files (and extra arguments, e.g. keyring_args)."""
    cmd = [str(helm), "template", release, str(chart), "--namespace", namespace]
    for v in values_files:
        cmd += ["-f", str(v)]
    cmd += list(extra_args)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise ChartError(f"helm template: {out.stderr.strip()}")
    return [d for d in yaml.safe_load_all(out.stdout) if d], out.stdout


def keyring_args(stoker, directory):
    """Makes a coordinator, a worker and a client key and their trust file (`stoker keygen --keyring`) and returns
    the helm arguments that hand them to the chart as an operator would: --set-file, never a values file."""
    out = subprocess.run([str(stoker), "keygen", "--keyring", str(directory)], capture_output=True, text=True)
    if out.returncode != 0:
        raise ChartError(f"stoker keygen: {out.stderr.strip()}")
    args = []
    for role in ("coordinator", "worker", "client"):
        args += ["--set-file", f"security.keys.{role}={directory}/{role}.key"]
    return args + ["--set-file", f"security.trust={directory}/trust"]


def project_volume(docs, volume, directory):
    """Writes a Secret or ConfigMap volume's files into directory as the kubelet projects them (its items, or every
    key, each with its item's mode or the volume's defaultMode, 0644 when neither is set), from the Secret or
    ConfigMap the chart rendered. ChartError for another source or a missing object."""
    if "secret" in volume:
        kind, name, source = "Secret", volume["secret"]["secretName"], volume["secret"]
    elif "configMap" in volume:
        kind, name, source = "ConfigMap", volume["configMap"]["name"], volume["configMap"]
    else:
        raise ChartError(f"volume {volume['name']} is neither a Secret nor a ConfigMap")
    obj = next((d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name), None)
    if obj is None:
        raise ChartError(f"volume {volume['name']}: the chart rendered no {kind} {name}")
    data = {k: base64.b64decode(v) for k, v in obj.get("data", {}).items()} if kind == "Secret" else \
        {k: v.encode() for k, v in obj.get("data", {}).items()}
    items = source.get("items") or [{"key": k, "path": k} for k in data]
    os.makedirs(directory, exist_ok=True)
    for item in items:
        path = os.path.join(directory, item["path"])
        if os.path.lexists(path):
            os.remove(path)  # projected again (a restarted pod): its read-only mode would refuse the write
        with open(path, "wb") as f:
            f.write(data[item["key"]])
        # The chart's mode, not one chosen here: processes refuse a key file others can read, so a Secret mounted
        # with the kubelet's default (0644) must fail the rehearsal as it would fail the pods.
        os.chmod(path, item.get("mode", source.get("defaultMode", 0o644)))
    return directory


def find(docs, kind, component):
    for d in docs:
        if d["kind"] == kind and d["metadata"]["labels"].get("app.kubernetes.io/component") == component:
            return d
    raise ChartError(f"the chart rendered no {kind} for {component}")


def pod_spec(workload):
    return workload["spec"]["template"]["spec"]


def env_of(workload):
    """The first container's plain env values (valueFrom entries are left out)."""
    return {e["name"]: e["value"] for e in pod_spec(workload)["containers"][0].get("env", []) if "value" in e}


def value_from(source, container, pod_name, index, pod_ip):
    """What the kubelet would put in a valueFrom variable; ChartError for a source this cannot stand in for."""
    field = source.get("fieldRef", {}).get("fieldPath")
    if field == "status.podIP":
        return pod_ip
    if field == "metadata.name":
        return pod_name
    if field == "metadata.annotations['batch.kubernetes.io/job-completion-index']":
        return str(index)
    resource = source.get("resourceFieldRef")
    if resource and resource["resource"] == "requests.cpu":
        cpu = str(container["resources"]["requests"]["cpu"])
        cores = float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
        return str(math.ceil(cores / float(resource.get("divisor", 1))))
    raise ChartError(f"cannot stand in for valueFrom {source} of {container['name']}")


def expected_batches(job_env, images):
    """Batches each rank receives over the job (remainder drop, the Job's default)."""
    batch, ranks = int(job_env["STOKER_BATCH_SIZE"]), int(job_env["STOKER_RANKS"])
    return (images // (batch * ranks)) * int(job_env["STOKER_EPOCHS"])


def check(stoker, manifest, job_env, logs):
    """`stoker check` on the ranks' delivery logs with the Job's spec: (its output, totals with "ok")."""
    argv = [str(stoker), "check", "--manifest", str(manifest)]
    spec = {"STOKER_JOB": "--job", "STOKER_BATCH_SIZE": "--batch-size", "STOKER_RANKS": "--ranks",
            "STOKER_EPOCHS": "--epochs", "STOKER_SEED": "--seed", "STOKER_PIPELINE": "--pipeline"}
    for name, flag in spec.items():
        argv += [flag, job_env[name]]
    out = subprocess.run(argv + [str(p) for p in logs], capture_output=True, text=True)
    summary = parse_check(out.stdout)
    summary["ok"] = (out.returncode == 0 and summary["epochs"] == int(job_env["STOKER_EPOCHS"]) and
                     summary["samples_planned"] > 0 and summary["lost"] == 0 and summary["duplicates"] == 0)
    return (out.stdout + out.stderr).strip(), summary


def parse_check(text):
    """Totals from `stoker check`'s per-epoch lines ("ok   epoch 0: planned 1024 (+0 padding), delivered 1024,
    quarantined 0, lost 0, duplicated 0, unexpected 0, corrupt 0; batches per rank [32 32]")."""
    totals = {"epochs": 0, "samples_planned": 0, "samples_delivered": 0, "duplicates": 0, "lost": 0,
              "quarantined": 0, "unexpected": 0, "corrupt": 0}
    names = {"planned": "samples_planned", "delivered": "samples_delivered", "duplicated": "duplicates",
             "lost": "lost", "quarantined": "quarantined", "unexpected": "unexpected", "corrupt": "corrupt"}
    batches = None
    for line in text.splitlines():
        if not re.match(r"^(ok|FAIL)\s+epoch \d+:", line):
            continue
        totals["epochs"] += 1
        for word, key in names.items():
            m = re.search(rf"\b{word} (\d+)", line)
            if m:
                totals[key] += int(m.group(1))
        b = re.search(r"batches per rank \[([\d ]+)\]", line)
        if b:
            counts = [int(x) for x in b.group(1).split()]
            batches = counts if batches is None else [a + c for a, c in zip(batches, counts)]
    totals["batches_per_rank"] = batches
    return totals


def workers_in_logs(logs):
    """Worker ids that delivered at least one logged batch (the delivery log's sixth column)."""
    seen = set()
    for p in logs:
        if p.exists():
            for line in p.read_text().splitlines():
                parts = line.split()
                if len(parts) > 5:
                    seen.add(parts[5])
    return seen
