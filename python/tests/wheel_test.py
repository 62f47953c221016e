#!/usr/bin/python3
"""The package as a user installs it: a wheel built from the build tree with `pip wheel`, installed into a clean
virtual environment (no system site-packages, no PYTHONPATH, no LD_LIBRARY_PATH, away from the source tree).
Proves:

  - the wheel carries libstoker_c.so and the libraries it loads (stoker/lib) and is tagged for this platform only;
  - `python -m stoker --version` there names the installed library and its C API;
  - there, a Loader connects to a real coordinator and reports its job (len), with libstoker_c.so, ZeroMQ and
    Cap'n Proto mapped from the installed package, not from the system.

    PYTHONPATH=build/python /usr/bin/python3 python/tests/wheel_test.py --bin-dir build/bin
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import unittest
import zipfile

import support

import stoker

BIN = None
SERVER_ENV = None
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(stoker.__file__)))  # build/python: what pip builds
IMAGES = 32


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, **kw)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited with {r.returncode}:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return r.stdout


class WheelTest(unittest.TestCase):
    cluster = wheel = venv = None

    @classmethod
    def setUpClass(cls):
        cls.cluster = support.Cluster(BIN, IMAGES, workers=1, server_env=SERVER_ENV)
        work = cls.cluster.work
        source = os.path.join(work, "source")  # pip builds in place: a copy keeps the build tree clean
        os.makedirs(source)
        for name in ("pyproject.toml", "setup.py", "stoker"):
            copy = shutil.copytree if os.path.isdir(os.path.join(PACKAGE, name)) else shutil.copy
            copy(os.path.join(PACKAGE, name), os.path.join(source, name))
        dist = os.path.join(work, "dist")
        # Offline: the build needs only setuptools and wheel, which are installed (no isolated build environment).
        run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", dist,
             source])
        (cls.wheel,) = glob.glob(os.path.join(dist, "stoker-*.whl"))
        cls.venv = os.path.join(work, "venv")
        run([sys.executable, "-m", "venv", cls.venv])
        cls.env = {k: v for k, v in os.environ.items()
                   if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "STOKER_LIBRARY", "PYTHONHOME")}
        run([os.path.join(cls.venv, "bin", "pip"), "install", "--no-index", "--no-deps", cls.wheel], env=cls.env)

    @classmethod
    def tearDownClass(cls):
        if cls.cluster:
            cls.cluster.stop()

    def python(self, *args):
        return run([os.path.join(self.venv, "bin", "python"), *args], env=self.env, cwd=self.venv)

    def test_the_wheel_carries_its_libraries_and_this_platforms_tag(self):
        name = os.path.basename(self.wheel)
        self.assertRegex(name, r"^stoker-[0-9.]+-py3-none-linux_[a-z0-9_]+\.whl$")
        with zipfile.ZipFile(self.wheel) as z:
            libs = {os.path.basename(n) for n in z.namelist() if "/stoker/lib/" in n}
        for lib in ("libstoker_c.so", "libzmq.so.5", "libcapnp-0.9.2.so", "libkj-0.9.2.so"):
            self.assertIn(lib, libs)

    def test_version_names_the_installed_library(self):
        out = self.python("-m", "stoker", "--version")
        self.assertIn(f"stoker {stoker.__version__} (C API 3, ", out)
        self.assertIn(os.path.join(self.venv, "lib"), out)

    def test_the_installed_package_connects_with_the_libraries_it_carries(self):
        script = f"""
import json, stoker
loader = stoker.Loader({self.cluster.endpoint!r}, "wheel", manifest={self.cluster.manifest!r}, batch_size=8,
                       device=-1, framework="numpy", connect_timeout="10s")
steps = len(loader)
maps = [line.split()[-1] for line in open("/proc/self/maps") if ".so" in line]
loader.close()
print(json.dumps({{"steps": steps, "maps": sorted(set(maps))}}))
"""
        result = json.loads(self.python("-c", script).splitlines()[-1])
        self.assertEqual(result["steps"], IMAGES // 8)
        installed = os.path.join(os.path.realpath(self.venv), "lib")
        for lib in ("libstoker_c.so", "libzmq.so.5", "libcapnp-0.9.2.so"):
            paths = [p for p in result["maps"] if os.path.basename(p) == lib]
            self.assertTrue(paths, f"{lib} not loaded: {result['maps']}")
            self.assertTrue(all(os.path.realpath(p).startswith(installed) for p in paths), paths)


if __name__ == "__main__":
    support.run_tests(sys.modules[__name__])
