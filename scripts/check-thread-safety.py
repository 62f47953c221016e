#!/usr/bin/env python3
"""Checks the lock annotations (base/sync.h: STOKER_GUARDED_BY, STOKER_REQUIRES, ...) with clang's
-Wthread-safety: every translation unit of the libraries and binaries in the build's compile_commands.json is parsed
by clang++ with -fsyntax-only (no code is generated: a fraction of a build's time), and any thread-safety warning
fails the check. GCC, which builds stoker, ignores the annotations; this is where they are enforced.

    scripts/check-thread-safety.py [--build-dir build] [--clang clang++-14] [--jobs N]

ctest runs it as thread_safety (scripts/install-deps.sh installs clang-14).
"""
import argparse
import concurrent.futures
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys

# Where shared state lives; tests, benchmarks and generated code are not checked.
CHECKED = ("coordinator/", "worker/", "client/", "base/", "dataset/", "wire/", "auth/", "storage/", "tools/",
           "datagen/")
# GCC's options that clang does not know or that would turn unrelated clang warnings into errors.
DROPPED = {"-Werror", "-Wno-error=restrict", "-Wno-error=maybe-uninitialized", "-fno-fat-lto-objects"}


def clang_command(entry, clang, top):
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out = [clang]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD") or a in DROPPED:
            continue
        out.append(a)
    return out + ["-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Wthread-safety-beta",
                  "-Werror=thread-safety", "-Werror=thread-safety-beta"]


def main():
    top = pathlib.Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-dir", default=os.environ.get("STOKER_BUILD_DIR", "build"))
    parser.add_argument("--clang", default="clang++-14")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    if shutil.which(args.clang) is None:
        print(f"thread-safety: {args.clang} not found (scripts/install-deps.sh installs clang-14)")
        return 1
    db = pathlib.Path(args.build_dir)
    if not db.is_absolute():
        db = top / db
    entries = json.loads((db / "compile_commands.json").read_text())
    units = {}
    for e in entries:
        path = pathlib.Path(e["file"])
        rel = path.relative_to(top).as_posix() if path.is_relative_to(top) else ""
        if rel.startswith(CHECKED) and path.suffix == ".cc" and not rel.endswith("_test.cc"):
            units.setdefault(rel, e)  # a file compiled into two targets is checked once
    failures = []

    def check(item):
        rel, entry = item
        r = subprocess.run(clang_command(entry, args.clang, top), cwd=entry["directory"], capture_output=True,
                           text=True)
        return rel, r.returncode, r.stderr

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for rel, code, err in pool.map(check, sorted(units.items())):
            if code != 0:
                failures.append(rel)
                sys.stdout.write(err)
    print(f"thread-safety: {len(units)} translation units, {len(failures)} with findings")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
