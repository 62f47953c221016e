#!/usr/bin/env python3
"""The installed stoker, as a program built outside the tree sees it (cmake/StokerInstall.cmake; ctest
install_consumer).

`cmake --install` into a temporary prefix lays out what it should and nothing else: the three binaries, the public
headers, libstoker.so with its SONAME and version, libstoker_c.so, the CMake package and stoker.pc. Each installed
header compiles on its own. tests/install/consumer, a CMake project, finds the package with find_package(stoker) and
builds a C++ program (stoker::client) and a C one (stoker::c) with nothing of this tree on their compile lines;
consumer/loader_main.cc builds with `pkg-config --cflags --libs stoker` and g++ alone. Then they run: Connect() where
nothing listens fails with DEADLINE_EXCEEDED or UNAVAILABLE; against a coordinator and a worker started from the
prefix's bin/ with --insecure, on a dataset the prefix's `stoker gen-dataset` and `stoker index` made, the CMake
program consumes a whole job through stoker::Client and the pkg-config one another through stoker::Loader.
Every process it starts is stopped and its temporary folder removed, whatever happens; every wait has a deadline.

    tests/install/install_test.py --build-dir build [--cmake cmake] [--keep]
"""
import argparse
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
CONSUMER = REPO / "tests" / "install" / "consumer"
HEADERS = sorted(p.name for p in (REPO / "include" / "stoker").glob("*.h"))
IMAGES, BATCH = 48, 8  # the dataset and the jobs: 6 batches each
ENV = {k: v for k, v in os.environ.items() if not k.startswith("STOKER_")}  # the servers' flags come from argv only


def run(cmd, timeout, **kwargs):
    """cmd's stdout; AssertionError with its output when it fails."""
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, env=ENV, **kwargs)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited with {r.returncode}:\n{r.stdout[-3000:]}"
                             f"{r.stderr[-3000:]}")
    return r.stdout


def project_version():
    return re.search(r"project\(stoker VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text()).group(1)


def cached(build, variable):
    match = re.search(rf"^{variable}:\w+=(.*)$", (build / "CMakeCache.txt").read_text(), re.M)
    return match.group(1) if match else None


def check_layout(prefix, libdir):
    """The installed files are exactly those expected; libstoker.so's links and SONAME follow the version."""
    version = project_version()
    soversion = ".".join(version.split(".")[:2])
    want = {"bin/stoker", "bin/stoker-coordinator", "bin/stoker-worker",
            *(f"include/stoker/{h}" for h in HEADERS),
            f"{libdir}/libstoker.so", f"{libdir}/libstoker.so.{soversion}", f"{libdir}/libstoker.so.{version}",
            f"{libdir}/libstoker_c.so", f"{libdir}/pkgconfig/stoker.pc",
            *(f"{libdir}/cmake/stoker/{f}" for f in ("stokerConfig.cmake", "stokerConfigVersion.cmake",
                                                     "stokerTargets.cmake"))}
    found = {str(p.relative_to(prefix)) for p in prefix.rglob("*") if p.is_file() or p.is_symlink()}
    found = {f for f in found if not re.fullmatch(rf"{libdir}/cmake/stoker/stokerTargets-\w+\.cmake", f)}
    assert found == want, f"installed: unexpected {sorted(found - want)}, missing {sorted(want - found)}"
    lib = prefix / libdir
    assert os.readlink(lib / "libstoker.so") == f"libstoker.so.{soversion}", os.readlink(lib / "libstoker.so")
    assert os.readlink(lib / f"libstoker.so.{soversion}") == f"libstoker.so.{version}"
    dynamic = run(["objdump", "-p", lib / "libstoker.so"], 60)
    assert re.search(rf"SONAME\s+libstoker\.so\.{re.escape(soversion)}\n", dynamic), "SONAME of libstoker.so"
    print(f"ok installed: {len(found)} files, libstoker.so.{version} (SONAME libstoker.so.{soversion})")
    return version


def check_headers(prefix, work):
    """Each installed header compiles on its own against the prefix alone; c_api.h as C too."""
    for h in HEADERS:
        run(["g++", "-std=c++20", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", f"-I{prefix / 'include'}",
             "-x", "c++", "-"], 120, input=f'#include "stoker/{h}"\n', cwd=work)
    run(["gcc", "-std=c11", "-fsyntax-only", "-Wall", "-Werror", f"-I{prefix / 'include'}", "-x", "c", "-"], 60,
        input='#include "stoker/c_api.h"\n', cwd=work)
    print(f"ok {len(HEADERS)} headers compile on their own")


def build_with_cmake(cmake, prefix, work, version, stoker_build):
    """tests/install/consumer against the prefix: its compile lines name the prefix, never this tree, and C++20
    comes from the package."""
    build = work / "consumer-build"
    run([cmake, "-S", CONSUMER, "-B", build, f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_C_COMPILER=gcc",
         "-DCMAKE_CXX_COMPILER=g++", "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"], 180)
    run([cmake, "--build", build, "-j2"], 300)
    commands = (build / "compile_commands.json").read_text()
    for tree in (REPO, stoker_build):
        assert str(tree) + "/" not in commands.replace(str(CONSUMER), ""), f"the consumer compiles against {tree}"
    assert str(prefix / "include") in commands, "the consumer's include path is not the prefix's"
    assert re.search(r"-std=(gnu|c)\+\+(20|2a)", commands), "stoker::client did not bring C++20"
    assert f"libstoker.so.{'.'.join(version.split('.')[:2])}" in run(["objdump", "-p", build / "consumer"], 60)
    print("ok find_package(stoker): consumer and c_consumer built")
    return build / "consumer", build / "c_consumer"


def build_with_pkg_config(prefix, libdir, work, version):
    env = dict(ENV, PKG_CONFIG_PATH=str(prefix / libdir / "pkgconfig"))
    pc = lambda *a: subprocess.run(["pkg-config", *a, "stoker"], capture_output=True, text=True, timeout=60,
                                   env=env, check=True).stdout.split()
    assert pc("--modversion") == [version], pc("--modversion")
    flags, lib = pc("--cflags", "--libs"), pc("--variable=libdir")[0]
    assert os.path.realpath(lib) == str((prefix / libdir).resolve()), f"stoker.pc's libdir is {lib}"
    program = work / "loader_consumer"
    run(["g++", "-std=c++20", CONSUMER / "loader_main.cc", *flags, f"-Wl,-rpath,{lib}", "-o", program], 300)
    print(f"ok pkg-config: {' '.join(flags)}")
    return program


class Servers:
    """A coordinator and a worker from the prefix's bin/, on loopback ports they pick, without CURVE."""

    def __init__(self, bin_dir, work):
        self.work, self.procs, self.logs = work, [], []
        self.endpoint = self._start("coordinator", [bin_dir / "stoker-coordinator", "--listen=tcp://127.0.0.1:0"])
        self._start("worker", [bin_dir / "stoker-worker", f"--coordinator={self.endpoint}",
                               "--listen=tcp://127.0.0.1:0", "--threads=1"])

    def _start(self, name, argv, deadline_s=30):
        """Starts a server; its endpoint once it has written it."""
        endpoint_file = self.work / f"{name}.endpoint"
        log = open(self.work / f"{name}.log", "w")
        self.logs.append(log)
        self.procs.append(subprocess.Popen(
            [str(a) for a in argv] + ["--insecure", f"--endpoint-file={endpoint_file}", "--metrics-listen=127.0.0.1:0"],
            stdout=log, stderr=subprocess.STDOUT, env=ENV))
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            if endpoint_file.exists() and endpoint_file.stat().st_size > 0:
                return endpoint_file.read_text().strip()
            if self.procs[-1].poll() is not None:
                raise AssertionError(f"{name} exited with {self.procs[-1].returncode}:\n"
                                     f"{(self.work / f'{name}.log').read_text()[-3000:]}")
            time.sleep(0.05)
        raise AssertionError(f"{name} wrote no endpoint within {deadline_s} s")

    def stop(self, deadline_s=20):
        """SIGTERM to each, then SIGKILL to any still running when the deadline (shared by all) has passed."""
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + deadline_s
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        for log in self.logs:
            log.close()


def run_programs(prefix, work, consumer, c_consumer, loader_consumer):
    print(run([c_consumer], 60).strip())
    with socket.socket() as held:  # bound, never listening: connections are refused while the test holds the port
        held.bind(("127.0.0.1", 0))
        print(run([consumer, "unreachable", f"tcp://127.0.0.1:{held.getsockname()[1]}"], 60).strip())
    bin_dir = prefix / "bin"
    data, manifest = work / "data", work / "data.stoker"
    run([bin_dir / "stoker", "gen-dataset", data, f"--images={IMAGES}", "--per-shard=16"], 120)
    run([bin_dir / "stoker", "index", data, "-o", manifest], 120)
    servers = Servers(bin_dir, work)
    try:
        print(run([consumer, "consume", servers.endpoint, manifest, "cmake-consumer", BATCH], 120).strip())
        print(run([loader_consumer, servers.endpoint, manifest, "pkg-config-consumer", BATCH], 120).strip())
    finally:
        servers.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", required=True, type=pathlib.Path)
    parser.add_argument("--cmake", default="cmake", help="the cmake that installs and builds the consumer")
    parser.add_argument("--keep", action="store_true", help="leave the temporary folder (prefix, builds, logs)")
    args = parser.parse_args()
    build = args.build_dir.resolve()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped test still stops its servers and cleans up
    libdir = cached(build, "CMAKE_INSTALL_LIBDIR") or "lib"
    work = pathlib.Path(tempfile.mkdtemp(prefix="stoker-install-"))
    try:
        prefix = work / "prefix"
        run([args.cmake, "--install", build, "--prefix", prefix], 300)
        version = check_layout(prefix, libdir)
        check_headers(prefix, work)
        consumer, c_consumer = build_with_cmake(args.cmake, prefix, work, version, build)
        loader_consumer = build_with_pkg_config(prefix, libdir, work, version)
        run_programs(prefix, work, consumer, c_consumer, loader_consumer)
    except (AssertionError, subprocess.SubprocessError) as e:
        print(f"FAIL {e}\n(work folder: {work}{'' if args.keep else ', removed'})", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("install: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
