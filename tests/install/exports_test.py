#!/usr/bin/env python3
"""What the shared libraries export: nothing but the public API (ctest install_exports).

libstoker.so (client/src/libstoker.map): every defined dynamic symbol (`nm -DC --defined-only`) belongs to a class or
a free function that a header of include/stoker/ defines, in namespace stoker (or stoker::internal::CheckFailed, which
STOKER_CHECK calls from the headers). So nothing of stoker's internals (stoker::client::ClientCore,
stoker::coordinator::, stoker::wire::, the layers' own names such as stoker::FlagSet), of a dependency (ZeroMQ,
Cap'n Proto, the static CUDA runtime) or of the standard library's instantiations is exported. And every free function
the public headers declare is exported, with the members a program cannot do without. libstoker_c.so (c_api.map):
only stoker_* symbols. No exported symbol names an internal type even in its signature (the private members that
would are local: see the map). Prints each offence; exits 1 if there is any.

    tests/install/exports_test.py --lib build/lib/libstoker.so --c-lib build/lib/libstoker_c.so
"""
import argparse
import pathlib
import re
import subprocess
import sys

PUBLIC = pathlib.Path(__file__).resolve().parent.parent.parent / "include" / "stoker"
NAMESPACES = ("stoker::internal", "stoker")  # the namespaces the public headers define things in, innermost first
CLASS = re.compile(r"^\s*(?:class|struct)\s+(?:\[\[\w+\]\]\s+)?(\w+)\b[^;{]*\{", re.M)  # a definition, not `class X;`
FUNCTION = re.compile(r"^(?![#/ ])([\w:<>,*&\[\] ]*?)\b(\w+)\(", re.M)  # declared at namespace level (column 0)
REQUIRED_MEMBERS = ("stoker::Client::Connect", "stoker::Client::Next", "stoker::Batch::Release",
                    "stoker::Loader::Open", "stoker::Loader::Next", "stoker::LoadedBatch::Release",
                    "stoker::Status::ToString", "stoker::JobSpec::Validate", "stoker::BatchView::bytes")
INTERNAL = re.compile(r"stoker::(client|coordinator|worker|wire|cuda|storage|datagen|tools|testing)::")
PREFIXES = ("typeinfo name for ", "typeinfo for ", "vtable for ", "VTT for ", "guard variable for ")


def split_top(name, sep):
    """`name` split at `sep` outside <>, () and []."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(name):
        if name[i] in "<([":
            depth += 1
        elif name[i] in ">)]":
            depth -= 1
        elif depth == 0 and name.startswith(sep, i):
            parts.append(name[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    parts.append(name[start:])
    return parts


def entity(symbol):
    """The qualified name a demangled symbol defines: `stoker::Client::Connect` for
    `stoker::Client::Connect(stoker::ClientOptions const&)`, `stoker::Status::ToString` for its [abi:cxx11] form."""
    for prefix in PREFIXES:
        if symbol.startswith(prefix):
            symbol = symbol[len(prefix):]
    depth = 0
    for i, c in enumerate(symbol):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c in "([" and depth == 0:
            return symbol[:i]
    return symbol


def defined_symbols(lib):
    out = subprocess.run(["nm", "-DC", "--defined-only", lib], capture_output=True, text=True, timeout=60, check=True)
    return [line.split(" ", 2)[2] for line in out.stdout.splitlines() if line.count(" ") >= 2]


def public_names():
    """(classes defined, functions declared at namespace level, of them those not inline) in include/stoker/."""
    classes, functions, out_of_line = set(), set(), set()
    for header in PUBLIC.glob("*.h"):
        text = header.read_text()
        classes.update(CLASS.findall(text))
        for before, name in FUNCTION.findall(text):
            functions.add(name)
            if "inline" not in before and header.name != "c_api.h":
                out_of_line.add(name)
    return classes, functions, out_of_line


def check_cxx(lib, problems):
    classes, functions, out_of_line = public_names()
    symbols = defined_symbols(lib)
    entities = set()
    for symbol in symbols:
        name = entity(symbol)
        entities.add(name)
        namespace = next((n for n in NAMESPACES if name.startswith(n + "::")), None)
        first = split_top(name[len(namespace) + 2:], "::")[0].split("<")[0] if namespace else None
        if first is None or (first not in classes and first not in functions):
            problems.append(f"{lib}: exports {symbol}: not a class or function of include/stoker/")
    for name in sorted(out_of_line):
        if f"stoker::{name}" not in entities and f"stoker::internal::{name}" not in entities:
            problems.append(f"{lib}: does not export {name}(), which include/stoker/ declares")
    for name in REQUIRED_MEMBERS:
        if name not in entities:
            problems.append(f"{lib}: does not export {name}")
    problems += [f"{lib}: exports {s}: its signature names stoker's internals" for s in symbols if INTERNAL.search(s)]
    for internal in ("stoker::client::ClientCore", "stoker::coordinator::", "stoker::wire::", "zmq", "capnp::", "cuda"):
        print(f"{lib}: {sum(internal in s for s in symbols)} symbols naming {internal}")
    print(f"{lib}: {len(symbols)} symbols exported, of {len(entities)} names")


def check_c(lib, problems):
    symbols = defined_symbols(lib)
    problems += [f"{lib}: exports {s}: not stoker_*" for s in symbols if not s.startswith("stoker_")]
    print(f"{lib}: {len(symbols)} symbols exported")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", required=True, help="libstoker.so")
    parser.add_argument("--c-lib", required=True, help="libstoker_c.so")
    args = parser.parse_args()
    problems = []
    check_cxx(args.lib, problems)
    check_c(args.c_lib, problems)
    for p in problems:
        print(p)
    print(f"exports: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
