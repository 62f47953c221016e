"""Where the cores go: CPU time of every thread on the machine between two snapshots of /proc, grouped by process
role (trainer, stoker workers, coordinator, other) and, inside the trainer, by thread name (PyTorch's intra-op
pool, the client's ZeroMQ I/O threads, the staging thread, ...). The trainer is the process started and every
process it started (torchrun's ranks), each of them also reported on its own. Used by resnet_headline.py during (b)'s measured
window; a standalone call samples the whole machine:

    python3 bench/thread_cpu.py --seconds 10 --trainer-pid PID
"""
import argparse
import json
import os
import re
import time

TICKS = os.sysconf("SC_CLK_TCK")


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def snapshot():
    """{(pid, tid): (process name, thread name, cpu seconds)} for every thread, each process's parent, and the
    monotonic time."""
    threads, parents = {}, {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        cmdline = _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace")
        process = cmdline.split(" ")[0].rsplit("/", 1)[-1] or _read(f"/proc/{pid}/comm").decode().strip()
        if process.startswith("python"):  # name a Python process by its script
            script = next((a for a in cmdline.split(" ")[1:] if a.endswith(".py")), "")
            process = script.rsplit("/", 1)[-1] or process
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            stat = _read(f"/proc/{pid}/task/{tid}/stat").decode(errors="replace")
            m = re.match(r"\d+ \((.*)\) (.*)", stat, re.S)
            if not m:
                continue
            fields = m.group(2).split()
            cpu = (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime
            threads[(int(pid), int(tid))] = (process, m.group(1), cpu)
            if tid == pid:
                parents[int(pid)] = int(fields[1])
    return {"time": time.monotonic(), "threads": threads, "parents": parents}


def _descendants(parents, root):
    """`root` and every process below it."""
    out, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in out:
                out.add(pid)
                frontier.append(pid)
    return out


def _thread_group(name):
    """Thread names with their numbers folded: 'ZMQbg/IO/3' -> 'ZMQbg/IO/*'."""
    return re.sub(r"\d+", "*", name)


def report(before, after, trainer_pid=None):
    """Cores used by role, by process name and, in the trainer, by thread group, over the window."""
    wall = after["time"] - before["time"]
    roles, processes, trainer_threads, trainer_processes = {}, {}, {}, {}
    trainers = _descendants(after.get("parents", {}), trainer_pid) if trainer_pid is not None else set()
    for key, (process, thread, cpu) in after["threads"].items():
        used = cpu - before["threads"].get(key, (None, None, 0.0))[2]
        if used <= 0:
            continue
        pid = key[0]
        if pid in trainers:
            role = "trainer"
            group = "main thread" if key[1] == pid else _thread_group(thread)
            trainer_threads[group] = trainer_threads.get(group, 0.0) + used
            name = f"{process} {pid}"
            trainer_processes[name] = trainer_processes.get(name, 0.0) + used
        elif process == "stoker-worker":
            role = "workers"
        elif process == "stoker-coordinator":
            role = "coordinator"
        else:
            role = "other"
        roles[role] = roles.get(role, 0.0) + used
        processes[process] = processes.get(process, 0.0) + used

    def cores(d):
        return {k: round(v / wall, 3) for k, v in sorted(d.items(), key=lambda kv: -kv[1])}

    return {"seconds": round(wall, 3), "cores_by_role": cores(roles), "cores_by_process": cores(processes),
            "trainer_cores_by_thread": cores(trainer_threads), "trainer_cores_by_process": cores(trainer_processes),
            "cores_total": round(sum(roles.values()) / wall, 3)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--trainer-pid", type=int)
    args = p.parse_args()
    a = snapshot()
    time.sleep(args.seconds)
    print(json.dumps(report(a, snapshot(), args.trainer_pid), indent=1))


if __name__ == "__main__":
    main()
