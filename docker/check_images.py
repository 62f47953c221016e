#!/usr/bin/env python3
"""Checks built images against what the Helm chart expects of them, on a real Docker engine (DOCKER_HOST; the
container test runs it on the images it has just built):

- each image runs as the numeric non-root user the chart's podSecurityContext names (runAsUser:runAsGroup);
- its labels name it as the chart does (title = the repository's last part, version = the chart's appVersion,
  source and licence);
- the coordinator's and worker's ENTRYPOINT is their binary (the chart passes no command); the trainer has
  `stoker` on PATH (the example Job's command is [stoker, consume]);
- it exposes the ports the chart's containers name;
- under the chart's container securityContext (read-only root, all capabilities dropped, no privilege escalation,
  that user, /tmp a tmpfs, no network) every binary starts and answers --help, so every library it loads is there;
  the trainer's Python package loads libstoker_c.so with numpy beside it, and the chart's key hook (its script,
  `stoker keygen`) runs there;
- the JPEG-only worker carries neither OpenCV imgcodecs nor GDAL; the -imgcodecs variant loads imgcodecs.
Image sizes are printed.

  docker/check_images.py [coordinator] [worker] [worker-imgcodecs] [trainer]     (default: all but worker-imgcodecs)
"""
import json
import os
import pathlib
import subprocess
import sys

import yaml

REPO = pathlib.Path(__file__).resolve().parent.parent
DOCKER = os.environ.get("DOCKER", "/usr/bin/docker")
ROLES = ("coordinator", "worker", "worker-imgcodecs", "trainer")
PYTHON_CHECK = ("import numpy, stoker; from stoker import _capi; v = _capi.lib().stoker_c_api_version(); "
                "assert v == _capi.API_VERSION, v; print('stoker', stoker.__version__, 'C API', v)")


def docker(*args):
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=120)


class Checker:
    def __init__(self):
        self.values = yaml.safe_load((REPO / "helm/stoker/values.yaml").read_text())
        self.chart = yaml.safe_load((REPO / "helm/stoker/Chart.yaml").read_text())
        pod = self.values["podSecurityContext"]
        self.user = f"{pod['runAsUser']}:{pod['runAsGroup']}"
        self.failures = []

    def expect(self, ok, what):
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            self.failures.append(what)

    def image_for(self, role):
        """(tag, chart repository) of the image the chart runs for role."""
        version = self.chart["appVersion"]
        v = self.values
        return {"coordinator": (f"{v['coordinator']['image']['repository']}:{version}", v["coordinator"]["image"]),
                "worker": (f"{v['worker']['image']['repository']}:{version}", v["worker"]["image"]),
                "worker-imgcodecs": (f"{v['worker']['image']['repository']}:{version}-imgcodecs",
                                     v["worker"]["image"]),
                "trainer": (f"{v['exampleJob']['image']['repository']}:{version}-cpu",
                            v["exampleJob"]["image"])}[role]

    def ports_for(self, role):
        if role == "coordinator":
            return set(self.values["coordinator"]["ports"].values())
        if role.startswith("worker"):
            return set(self.values["worker"]["ports"].values())
        return {self.values["exampleJob"]["metricsPort"]}

    def run(self, tag, entrypoint, *args):
        """The image under the chart's container securityContext, with no network."""
        c = self.values["containerSecurityContext"]
        flags = ["--rm", "--network", "none", "--user", self.user, "--tmpfs", "/tmp"]
        flags += ["--read-only"] if c.get("readOnlyRootFilesystem") else []
        flags += ["--security-opt", "no-new-privileges"] if c.get("allowPrivilegeEscalation") is False else []
        flags += [f"--cap-drop={cap}" for cap in c.get("capabilities", {}).get("drop", [])]
        return docker("run", *flags, "--entrypoint", entrypoint, tag, *args)

    def check(self, role):
        tag, image = self.image_for(role)
        found = docker("image", "inspect", tag)
        self.expect(found.returncode == 0, f"{role}: image {tag} exists")
        if found.returncode != 0:
            return None
        info = json.loads(found.stdout)[0]
        config = info["Config"]
        user = config.get("User") or "root"
        self.expect(user == self.user and not user.startswith("0"),
                    f"{role}: runs as {user} (chart: runAsUser:runAsGroup {self.user}, runAsNonRoot)")
        labels = config.get("Labels") or {}
        want = {"org.opencontainers.image.title": image["repository"].rsplit("/", 1)[-1],
                "org.opencontainers.image.version": self.chart["appVersion"],
                "org.opencontainers.image.source": self.chart["sources"][0],
                "org.opencontainers.image.licenses": self.chart["annotations"]["artifacthub.io/license"]}
        for key, value in want.items():
            self.expect(labels.get(key) == value, f"{role}: label {key}={labels.get(key)!r} (want {value!r})")
        exposed = {int(p.split("/")[0]) for p in (config.get("ExposedPorts") or {})}
        self.expect(self.ports_for(role) <= exposed,
                    f"{role}: exposes {sorted(exposed)} (chart ports {sorted(self.ports_for(role))})")

        if role in ("coordinator", "worker", "worker-imgcodecs"):
            binary = f"/usr/local/bin/stoker-{role.split('-')[0]}"
            self.expect(config.get("Entrypoint") == [binary], f"{role}: ENTRYPOINT {config.get('Entrypoint')}")
            r = self.run(tag, binary, "--help")
            detail = f": {r.stderr.strip()[-300:]}" if r.returncode else ""
            self.expect(r.returncode == 0,
                        f"{role}: {binary} --help under the chart's securityContext (exit {r.returncode}{detail})")
        if role.startswith("worker") or role == "trainer":
            r = self.run(tag, "stoker", "--help")  # resolved on the image's PATH, as the Job's command is
            self.expect(r.returncode == 0, f"{role}: stoker --help on PATH (exit {r.returncode})")
        if role.startswith("worker"):
            r = self.run(tag, "sh", "-c", "dpkg-query -W -f '${Package}\\n'; ldd /usr/local/bin/stoker-worker")
            gdal = [p for p in r.stdout.split() if p.startswith("libgdal")]
            imgcodecs = "libopencv_imgcodecs" in r.stdout
            if role == "worker":
                self.expect(r.returncode == 0 and not gdal and not imgcodecs,
                            f"worker: JPEG only (GDAL packages {gdal or 'none'}, loads imgcodecs: {imgcodecs})")
            else:
                self.expect(r.returncode == 0 and imgcodecs, f"worker-imgcodecs: loads OpenCV imgcodecs")
        if role == "trainer":
            r = self.run(tag, "python3", "-c", PYTHON_CHECK)
            self.expect(r.returncode == 0, f"trainer: Python package loads libstoker_c.so "
                                           f"({(r.stdout or r.stderr).strip()[-300:]})")
            # The chart's key hook runs in this image: its script starts (python3 with ssl and urllib), and
            # `stoker keygen` writes keys into /tmp under the read-only root.
            script = (REPO / "helm/stoker/files/make-keys.py").read_text()
            r = self.run(tag, "python3", "-c", script, "--help")
            self.expect(r.returncode == 0, f"trainer: the chart's key hook script does not start "
                                           f"({(r.stdout or r.stderr).strip()[-300:]})")
            r = self.run(tag, "stoker", "keygen", "--keyring", "/tmp/keys")
            self.expect(r.returncode == 0, f"trainer: stoker keygen under the chart's securityContext "
                                           f"({(r.stdout or r.stderr).strip()[-300:]})")
        return tag, info["Size"]


def main():
    roles = sys.argv[1:] or ["coordinator", "worker", "trainer"]
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        print(f"usage: docker/check_images.py [{'] ['.join(ROLES)}]; not {unknown}", file=sys.stderr)
        return 2
    checker = Checker()
    sizes = [checker.check(role) for role in roles]
    print("image sizes:")
    for entry in filter(None, sizes):
        print(f"  {entry[0]:<60} {entry[1] / 1e6:5.0f} MB")
    print(f"images: {'ok' if not checker.failures else f'{len(checker.failures)} problems'}")
    return 1 if checker.failures else 0


if __name__ == "__main__":
    sys.exit(main())
