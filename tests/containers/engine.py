"""A private Docker engine for the container tests: Debian's dockerd (docker.io) started by the test with its own
data-root, exec-root and socket, so it neither needs nor touches a system engine, and stopped by its pid at the end
whatever happens (Engine is a context manager; the test turns SIGTERM and SIGINT into exceptions so that its
`finally` runs).

It changes nothing on the host's network configuration: no default bridge (--bridge=none; the tests make their own
network), no iptables rules, no ip_forward sysctl. Containers on a user-defined bridge still reach each other and
the host reaches them at their addresses, which is all the tests need; builds use the host's network.

A run that was killed before it could stop its engine leaves its pid file behind; the next run with the same
working directory stops that engine first (only if the pid is still a dockerd of that data-root).
"""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time

# Debian's client by its path: a newer docker on PATH may want buildx for `docker build`, which Debian lacks.
DOCKER = os.environ.get("STOKER_DOCKER", "/usr/bin/docker")
DOCKERD = os.environ.get("STOKER_DOCKERD") or ("/usr/sbin/dockerd" if os.path.exists("/usr/sbin/dockerd")
                                               else shutil.which("dockerd") or "/usr/sbin/dockerd")


class EngineError(RuntimeError):
    pass


def _is_dockerd_of(pid, data_root):
    try:
        cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(cmdline) and cmdline[0].endswith(b"dockerd") and str(data_root).encode() in cmdline


def _wait_gone(pid, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pathlib.Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                os.waitpid(pid, os.WNOHANG)  # exited; reaped here if it is our child, else by whoever adopted it
                return True
        except (OSError, ChildProcessError):
            return True  # no such process
        time.sleep(0.1)
    return False


class Engine:
    """dockerd under `work`/engine. docker(...) runs the client against it; env() is the environment for scripts
    that call docker themselves (DOCKER_HOST and DOCKER)."""

    def __init__(self, work, say, keep_data=False):
        self.dir = pathlib.Path(work) / "engine"
        self.data_root = self.dir / "data"
        self.pid_file = self.dir / "dockerd.pid"
        self.log_path = self.dir / "dockerd.log"
        self.say = say
        self.keep_data = keep_data
        self.proc = None
        self.run_dir = None  # exec-root and socket: a short path (unix socket paths are limited to 108 bytes)

    # --- lifecycle ----------------------------------------------------------------------------------------------
    def __enter__(self):
        for tool in (DOCKER, DOCKERD):
            if not os.access(tool, os.X_OK):
                raise EngineError(f"{tool} not found: install Debian's docker.io (scripts/install-deps.sh does), "
                                  "or set STOKER_SKIP_CONTAINERS=1 to skip the container tests")
        if os.geteuid() != 0:
            raise EngineError("the container tests start their own dockerd and need root")
        self.dir.mkdir(parents=True, exist_ok=True)
        self._stop_leftover()
        if not self.keep_data and self.data_root.exists():
            shutil.rmtree(self.data_root)
        self.data_root.mkdir(parents=True, exist_ok=True)
        self.run_dir = pathlib.Path(tempfile.mkdtemp(prefix="stoker-engine-"))
        self.socket = self.run_dir / "docker.sock"
        argv = [DOCKERD, "--data-root", str(self.data_root), "--exec-root", str(self.run_dir / "exec"),
                "--pidfile", str(self.run_dir / "dockerd.pid"), "-H", f"unix://{self.socket}",
                "--bridge=none", "--iptables=false", "--ip-forward=false", "--ip-masq=false",
                "--storage-driver=overlay2"]
        log = open(self.log_path, "w")
        # Its own session: a Ctrl-C in the terminal reaches the test, which stops containers before the engine.
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.pid_file.write_text(f"{self.proc.pid}\n{self.data_root}\n{self.run_dir}\n")
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise EngineError(f"dockerd exited with {self.proc.returncode}:\n{self._log_tail()}")
            if self.socket.exists() and self.docker("version", check=False, capture=True).returncode == 0:
                break
            if time.monotonic() > deadline:
                raise EngineError(f"dockerd did not answer within 60 s:\n{self._log_tail()}")
            time.sleep(0.2)
        info = json.loads(self.docker("info", "--format", "{{json .}}", capture=True).stdout)
        if info.get("Driver") != "overlay2" or not any("seccomp" in o for o in info.get("SecurityOptions", [])):
            raise EngineError(f"engine has storage driver {info.get('Driver')} and security options "
                              f"{info.get('SecurityOptions')}; the tests need overlay2 and seccomp")
        self.say(f"dockerd {info.get('ServerVersion')} pid {self.proc.pid}: data-root {self.data_root}, "
                 f"socket {self.socket}")
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def stop(self):
        if self.proc is None:
            return
        pid, self.proc = self.proc.pid, None
        os.kill(pid, signal.SIGTERM)  # dockerd stops its containers and its own containerd on SIGTERM
        if not _wait_gone(pid, 60):
            self.say(f"dockerd {pid} did not stop within 60 s of SIGTERM: SIGKILL")
            os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, 10)
        self._kill_managed_containerd()
        self._unmount_below(self.data_root)
        self._unmount_below(self.run_dir)
        self.pid_file.unlink(missing_ok=True)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if not self.keep_data:
            shutil.rmtree(self.data_root, ignore_errors=True)
        self.say(f"dockerd {pid} stopped" + ("" if self.keep_data else "; its data-root removed"))

    def _stop_leftover(self):
        if not self.pid_file.exists():
            return
        lines = self.pid_file.read_text().split("\n")
        pid = int(lines[0]) if lines[0].isdigit() else 0
        if pid and _is_dockerd_of(pid, self.data_root):
            self.say(f"stopping dockerd {pid} left running by an earlier run")
            os.kill(pid, signal.SIGTERM)
            if not _wait_gone(pid, 60):
                os.kill(pid, signal.SIGKILL)
                _wait_gone(pid, 10)
        self._unmount_below(self.data_root)
        run_dir = pathlib.Path(lines[2]) if len(lines) > 2 and lines[2].startswith(tempfile.gettempdir()) else None
        if run_dir and run_dir.name.startswith("stoker-engine-"):
            self._unmount_below(run_dir)
            shutil.rmtree(run_dir, ignore_errors=True)
        self.pid_file.unlink()

    def _kill_managed_containerd(self):
        """dockerd stops the containerd it started; this is for the case where it was killed instead."""
        pid_file = self.run_dir / "exec" / "containerd" / "containerd.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text().strip() or 0)
            cmdline = pathlib.Path(f"/proc/{pid}/cmdline")
            if pid and cmdline.exists() and str(self.run_dir).encode() in cmdline.read_bytes():
                os.kill(pid, signal.SIGKILL)
                _wait_gone(pid, 10)

    @staticmethod
    def _unmount_below(root):
        if root is None:
            return
        prefix = str(root) + "/"
        mounts = [line.split()[1] for line in pathlib.Path("/proc/mounts").read_text().splitlines()]
        for m in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
            subprocess.run(["umount", "-l", m], check=False)

    def _log_tail(self, lines=20):
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    # --- using it -----------------------------------------------------------------------------------------------
    def env(self):
        return {**os.environ, "DOCKER_HOST": f"unix://{self.socket}", "DOCKER": DOCKER}

    def docker(self, *args, check=True, capture=False, timeout=120, input=None):
        out = subprocess.run([DOCKER, *args], env=self.env(), capture_output=capture, text=True, timeout=timeout,
                             input=input)
        if check and out.returncode != 0:
            detail = (out.stderr or "").strip() if capture else ""
            raise EngineError(f"docker {' '.join(args)} exited {out.returncode}{': ' + detail if detail else ''}")
        return out

    def inspect(self, kind, name):
        out = self.docker(kind, "inspect", name, capture=True)
        return json.loads(out.stdout)[0]

    def remove_labelled(self, label):
        """Every container, network and volume carrying `label`, removed (containers first: they hold the rest)."""
        for kind, ls, rm in (("container", ["ps", "-aq"], ["rm", "-f", "-v"]),
                             ("network", ["network", "ls", "-q"], ["network", "rm"]),
                             ("volume", ["volume", "ls", "-q"], ["volume", "rm", "-f"])):
            ids = self.docker(*ls, "--filter", f"label={label}", capture=True, check=False).stdout.split()
            if ids:
                self.docker(*rm, *ids, capture=True, check=False)
        left = {k: self.docker(*ls, "--filter", f"label={label}", capture=True, check=False).stdout.split()
                for k, ls in (("containers", ["ps", "-aq"]), ("networks", ["network", "ls", "-q"]),
                              ("volumes", ["volume", "ls", "-q"]))}
        return {k: v for k, v in left.items() if v}
