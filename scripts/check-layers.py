#!/usr/bin/env python3
"""Checks that no include runs back up a layer, for the files the compiler cannot check on its own.

The build gives each folder's library an include root that holds only the folders below it
(cmake/StokerTargets.cmake, stoker_include_root), so a translation unit that includes a higher layer does not
compile. A header is compiled only as part of whichever translation unit includes it, though, with that unit's
include roots: a header of base/ that included "wire/..." would compile inside any wire/ or coordinator/ file. This
script closes that gap. For every folder it takes the include roots its library's own translation units are
compiled with (from compile_commands.json), and requires every quoted include in every header and source of the
folder to resolve under those roots or next to the file. Tests are left to the compiler: a test binary may link more
than the library it tests (an in-process coordinator beside the client, generated data for the decoder).
Public headers (include/stoker/) may include only other public headers: the installed API has nothing else.
Prints each offence; exits 1 if there is any.

    scripts/check-layers.py [--build-dir build]      # ctest runs it as layers
"""
import argparse
import collections
import json
import os
import pathlib
import re
import shlex
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCES = {".h", ".cc", ".cu"}
PUBLIC = pathlib.Path("include/stoker")


def is_test(path):
    """Tests and their helpers (foo_test.cc, impl_test_fixture.h, test_kernels.cu) are left to the compiler."""
    return "_test" in path.stem or path.stem.startswith("test_")


def include_roots(entry):
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    roots, i = [], 0
    while i < len(args):
        a = args[i]
        if a in ("-I", "-isystem", "-iquote"):
            roots.append(args[i + 1])
            i += 2
            continue
        for flag in ("-I", "-isystem", "-iquote"):
            if a.startswith(flag) and len(a) > len(flag):
                roots.append(a[len(flag):])
        i += 1
    return [pathlib.Path(entry["directory"], r).resolve() if not os.path.isabs(r) else pathlib.Path(r)
            for r in roots]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default="build")
    args = parser.parse_args()
    top = pathlib.Path.cwd().resolve()
    build = pathlib.Path(args.build_dir).resolve()
    database = json.loads((build / "compile_commands.json").read_text())
    roots = collections.defaultdict(set)  # folder -> include roots of its library's translation units
    for entry in database:
        source = pathlib.Path(entry["file"]).resolve()
        if source.is_relative_to(build) or not source.is_relative_to(top):
            continue  # generated code (the Cap'n Proto schemas' C++), wherever the build tree is
        relative = source.relative_to(top)
        if is_test(relative) or relative.parts[0] in ("tests", "bench"):
            continue
        roots[relative.parts[0]].update(include_roots(entry))
    problems = []
    for folder in sorted(roots):
        for path in sorted((top / folder).rglob("*")):
            if path.suffix not in SOURCES or not path.is_file() or is_test(path):
                continue
            for name in INCLUDE.findall(path.read_text(errors="replace")):
                if (path.parent / name).exists():
                    continue
                if any((root / name).exists() for root in roots[folder]):
                    continue
                problems.append(f"{path.relative_to(top)}: includes \"{name}\", which {folder}/'s library cannot "
                                "see (a higher layer, or a component it does not link)")
    for path in sorted((top / PUBLIC).glob("*.h")):
        for name in INCLUDE.findall(path.read_text()):
            if not (name.startswith("stoker/") and (top / "include" / name).exists()):
                problems.append(f"{path.relative_to(top)}: includes \"{name}\"; a public header may include only "
                                "other public headers (include/stoker/)")
    for p in problems:
        print(p)
    print(f"layers: {len(roots)} folders, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
