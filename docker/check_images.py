#!/usr/bin/env python3
"""Checks the Dockerfiles against a real build, for a machine with no Docker engine (CI, this devbox):

- each image's runtime package set (scripts/install-deps.sh, STOKER_DEPS=coordinator|worker|trainer) provides
  every shared library its binaries load (readelf NEEDED -> the file ldd resolves -> the Debian package owning it);
- every file an image copies out of the build stage exists in a build;
- every stage runs as the numeric non-root user the Helm chart's securityContext names (runAsUser);
- the coordinator and worker ENTRYPOINTs are the binaries the rehearsal and the chart expect.

  docker/check_images.py [--bin build/bin]
"""
import argparse
import pathlib
import re
import subprocess
import sys

import yaml

REPO = pathlib.Path(__file__).resolve().parent.parent
# The C/C++ runtime every base image has.
BASE = {"libc6", "libstdc++6", "libgcc-s1"}
# Binaries each image carries (the trainer's client libraries are static; `stoker` is what loads libraries).
IMAGES = {"coordinator": ["stoker-coordinator"], "worker": ["stoker-worker", "stoker"],
          "trainer": ["stoker", "../lib/libstoker_c.so"]}


def runtime_packages(role):
    """The package list install-deps.sh would install for STOKER_DEPS=role (it prints it with --list)."""
    out = subprocess.run([str(REPO / "scripts/install-deps.sh"), "--list"], env={"STOKER_DEPS": role, "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def needed_packages(binary):
    """Debian packages owning the shared libraries the binary loads directly."""
    needed = re.findall(r"\(NEEDED\).*\[(.+)\]", subprocess.run(["readelf", "-d", binary], capture_output=True,
                                                                 text=True, check=True).stdout)
    resolved = dict(re.findall(r"^\s*(\S+) => (\S+)", subprocess.run(["ldd", binary], capture_output=True,
                                                                         text=True, check=True).stdout, re.M))
    packages = {}
    for lib in needed:
        path = resolved.get(lib)
        if path is None:  # the dynamic loader itself
            continue
        real = str(pathlib.Path(path).resolve())
        owner = subprocess.run(["dpkg", "-S", real], capture_output=True, text=True)
        if owner.returncode != 0:
            owner = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
        packages[lib] = owner.stdout.split(":")[0] if owner.returncode == 0 else None
    return packages


def stages(dockerfile):
    """{stage name: [instruction lines]} with continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", dockerfile.read_text())
    out, current = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"FROM\s+\S+(?:\s+AS\s+(\S+))?", line, re.I)
        if m:
            current = m.group(1) or f"final:{dockerfile.name}"
            out[current] = []
        elif current:
            out[current].append(line)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", default=str(REPO / "build" / "bin"))
    bin_dir = pathlib.Path(p.parse_args().bin)
    failures = []
    for role, binaries in IMAGES.items():
        have = runtime_packages(role) | BASE
        for b in binaries:
            for lib, package in needed_packages(bin_dir / b).items():
                if package is None or package not in have:
                    failures.append(f"{role} image: {b} loads {lib} from {package or 'no package'}, "
                                    f"which STOKER_DEPS={role} does not install")
        print(f"{role}: {', '.join(binaries)} need only {', '.join(sorted(runtime_packages(role)))} (+ {', '.join(sorted(BASE))})")

    values = yaml.safe_load((REPO / "helm/stoker/values.yaml").read_text())
    uid, gid = values["podSecurityContext"]["runAsUser"], values["podSecurityContext"]["runAsGroup"]
    all_stages = {}
    for dockerfile in (REPO / "docker/Dockerfile", REPO / "docker/trainer.Dockerfile"):
        all_stages.update(stages(dockerfile))
    for name in ("coordinator", "worker", f"final:trainer.Dockerfile"):
        lines = all_stages.get(name)
        if lines is None:
            failures.append(f"no stage {name}")
            continue
        users = [l.split()[1] for l in lines if l.upper().startswith("USER ")]
        if users[-1:] != [f"{uid}:{gid}"]:
            failures.append(f"stage {name} runs as {users[-1:] or 'root'}, the chart expects {uid}:{gid}")
        for line in lines:
            m = re.match(r"COPY\s+--from=build\s+(?:--\S+\s+)*(.+)\s+\S+$", line)
            for src in (m.group(1).split() if m else []):
                if src.startswith("/src/build/bin/") and not (bin_dir / pathlib.Path(src).name).exists():
                    failures.append(f"stage {name} copies {src}, which a build does not make")
    for role in ("coordinator", "worker"):
        entry = [l for l in all_stages.get(role, []) if l.upper().startswith("ENTRYPOINT")]
        if entry != [f'ENTRYPOINT ["/usr/local/bin/stoker-{role}"]']:
            failures.append(f"stage {role}: ENTRYPOINT is {entry}")
    for f in failures:
        print(f"FAIL {f}")
    print(f"images: {'ok' if not failures else f'{len(failures)} problems'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
