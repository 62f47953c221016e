"""A rendered pod template as `docker run` arguments: the container's image, command, environment, volumes, resource
limits and security context, as the kubelet would apply them, on a user-defined bridge network with a fixed address.

What Docker expresses differently is mapped and reported once, in words (see `notes`): runAsUser/runAsGroup ->
--user, fsGroup -> a supplementary group (a named volume takes its owner from the image's directory),
readOnlyRootFilesystem -> --read-only, allowPrivilegeEscalation: false -> no-new-privileges, capabilities ->
--cap-drop/--cap-add, seccomp RuntimeDefault -> the engine's default profile, an emptyDir -> a tmpfs, a PVC -> a
named volume or a bind-mounted host directory, limits -> --memory/--cpus, the pod IP -> the container's address.
A setting with no mapping here (a new securityContext field, a new volume type, another valueFrom) is an error,
so a chart change cannot silently fall out of the test.
"""
import re
import sys
import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
import rendered_chart  # noqa: E402

POD_SECURITY = {"runAsNonRoot", "runAsUser", "runAsGroup", "fsGroup", "fsGroupChangePolicy", "seccompProfile"}
CONTAINER_SECURITY = {"allowPrivilegeEscalation", "readOnlyRootFilesystem", "runAsNonRoot", "capabilities",
                      "runAsUser", "runAsGroup"}
UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9}


def _bytes(quantity):
    m = re.fullmatch(r"(\d+)([KMG]i?)?", str(quantity))
    if not m:
        raise rendered_chart.ChartError(f"memory quantity {quantity!r}")
    return int(m.group(1)) * UNITS.get(m.group(2) or "", 1)


def _cpus(quantity):
    q = str(quantity)
    return float(q[:-1]) / 1000 if q.endswith("m") else float(q)


class PodContainer:
    """The first container of `workload`'s pod template as pod `name`: run_args() for `docker run`."""

    def __init__(self, workload, name, ip, volumes, index=0, image=None, extra_env=None, extra_mounts=None):
        """volumes: volume name -> ("tmpfs",) | ("volume", docker volume name) | ("bind", host directory). image
        replaces the manifest's image (the CUDA trainer has no CPU build of that name); extra_env and extra_mounts
        (container path -> host directory) are what the test adds to the pod."""
        self.workload = workload
        self.pod = rendered_chart.pod_spec(workload)
        self.container = self.pod["containers"][0]
        self.name, self.ip, self.index = name, ip, index
        self.volumes = volumes
        self.image = image or self.container["image"]
        self.extra_env = extra_env or {}
        self.extra_mounts = extra_mounts or {}
        self.notes = set()

    def env(self):
        out = {}
        for e in self.container.get("env", []):
            if "valueFrom" in e:
                out[e["name"]] = rendered_chart.value_from(e["valueFrom"], self.container, self.name, self.index,
                                                           self.ip)
                if e["valueFrom"].get("fieldRef", {}).get("fieldPath") == "status.podIP":
                    self.notes.add("status.podIP -> the container's address on the test network")
            else:
                # As the kubelet does: $(NAME) of a variable defined earlier is its value; any other stays as written.
                out[e["name"]] = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: out.get(m.group(1), m.group(0)),
                                        e["value"])
        out.update(self.extra_env)
        return out

    def security_args(self):
        pod_sc = self.pod.get("securityContext", {})
        sc = self.container.get("securityContext", {})
        unknown = (set(pod_sc) - POD_SECURITY) | (set(sc) - CONTAINER_SECURITY)
        if unknown:
            raise rendered_chart.ChartError(f"{self.name}: no docker mapping for securityContext {sorted(unknown)}")
        user, group = sc.get("runAsUser", pod_sc.get("runAsUser")), sc.get("runAsGroup", pod_sc.get("runAsGroup"))
        if user is None or group is None:
            raise rendered_chart.ChartError(f"{self.name}: the chart sets no numeric user")
        if (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")) and int(user) == 0:
            raise rendered_chart.ChartError(f"{self.name}: runAsNonRoot with user 0")
        args = ["--user", f"{user}:{group}"]
        if "fsGroup" in pod_sc:
            args += ["--group-add", str(pod_sc["fsGroup"])]
            self.notes.add("fsGroup -> a supplementary group; named volumes take their owner from the image")
        profile = pod_sc.get("seccompProfile", {}).get("type", "RuntimeDefault")
        if profile != "RuntimeDefault":
            raise rendered_chart.ChartError(f"{self.name}: seccompProfile {profile}")
        self.notes.add("seccompProfile RuntimeDefault -> the engine's default seccomp profile")
        if sc.get("readOnlyRootFilesystem"):
            args.append("--read-only")
        if sc.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        caps = sc.get("capabilities", {})
        args += [f"--cap-drop={c}" for c in caps.get("drop", [])] + [f"--cap-add={c}" for c in caps.get("add", [])]
        return args

    def volume_args(self):
        defined = {v["name"]: v for v in self.pod.get("volumes", [])}
        claims = {c["metadata"]["name"] for c in self.workload["spec"].get("volumeClaimTemplates", [])}
        args = []
        for m in self.container.get("volumeMounts", []):
            name, path, ro = m["name"], m["mountPath"], m.get("readOnly", False)
            if name not in self.volumes:
                raise rendered_chart.ChartError(f"{self.name}: no stand-in for volume {name} "
                                                f"({sorted(defined.get(name, {'claim': 1}))})")
            kind = self.volumes[name]
            if kind[0] == "tmpfs":
                if "emptyDir" not in defined.get(name, {}):
                    raise rendered_chart.ChartError(f"{self.name}: volume {name} is not an emptyDir")
                args += ["--tmpfs", path]
                self.notes.add(f"emptyDir {name} at {path} -> a tmpfs")
            elif kind[0] == "volume":
                if name not in claims and "persistentVolumeClaim" not in defined.get(name, {}):
                    raise rendered_chart.ChartError(f"{self.name}: volume {name} is not a claim")
                args += ["--mount", f"type=volume,src={kind[1]},dst={path}" + (",readonly" if ro else "")]
                self.notes.add(f"claim {name} at {path} -> docker volume {kind[1]}")
            else:
                args += ["--mount", f"type=bind,src={kind[1]},dst={path}" + (",readonly" if ro else "")]
                self.notes.add(f"volume {name} at {path} -> host directory {kind[1]}" + (" (read-only)" if ro else ""))
        for path, host in self.extra_mounts.items():
            args += ["--mount", f"type=bind,src={host},dst={path}"]
        return args

    def resource_args(self):
        limits = self.container.get("resources", {}).get("limits", {})
        args = []
        if "memory" in limits:
            args += ["--memory", str(_bytes(limits["memory"]))]
        if "cpu" in limits:
            args += ["--cpus", str(_cpus(limits["cpu"]))]
        if "nvidia.com/gpu" in limits:
            self.notes.add("nvidia.com/gpu -> none: the CPU trainer image stands in for the CUDA one")
        return args

    def run_args(self, network, label, aliases=()):
        """Arguments for `docker run -d`: the container, named after the pod, at its address on `network`."""
        args = ["--name", self.name, "--hostname", self.name, "--label", label,
                "--network", network, "--ip", self.ip]
        for a in aliases:
            args += ["--network-alias", a]
        args += self.security_args() + self.volume_args() + self.resource_args()
        for k, v in sorted(self.env().items()):
            args += ["--env", f"{k}={v}"]
        command = self.container.get("command")
        if command:
            args += ["--entrypoint", command[0], self.image] + command[1:]
        else:
            args.append(self.image)
        return args + [str(a) for a in self.container.get("args", [])]

    def probe(self, kind):
        """(path, port number) of the container's httpGet probe `kind` (readinessProbe, livenessProbe)."""
        p = self.container[kind]["httpGet"]
        port = p["port"]
        if not isinstance(port, int):
            port = next(cp["containerPort"] for cp in self.container["ports"] if cp["name"] == port)
        return p["path"], port

    def grace_seconds(self):
        return int(self.pod.get("terminationGracePeriodSeconds", 30))
