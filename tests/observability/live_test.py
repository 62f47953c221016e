#!/usr/bin/python3
"""The observability proof, end to end: a real Prometheus (Debian's `prometheus`) scrapes a live `stoker demo`
(coordinator, workers and clients as separate processes on loopback) plus a stand-in dcgm-exporter, loads
helm/stoker/files/rules.yaml, and this test checks through Prometheus's HTTP API that:

  - every component's /metrics passes `promtool check metrics`, and /healthz, /readyz, /state answer;
  - every query of every dashboard panel (helm/stoker/files/dashboards/*.json), every template variable and every
    recording rule returns data without error, and every alert expression evaluates without error;
  - starved (one slow worker, fast consumers): every GPU's stall ratio is >= 20 % and the critical
    StokerInputStarved alert is pending or firing;
  - healthy (enough workers, slower consumers): every GPU's stall ratio is < 5 % and no stoker alert is active.

With --render DIR it also draws the overview's key panels from the starved run's data (scripts/render_panels.py).
Run by ctest (label observability); standard library only, plus python3-yaml for the rule file.

    /usr/bin/python3 tests/observability/live_test.py --bin-dir build/bin [--render /tmp/panels] [--keep DIR]
"""
import argparse
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES = os.path.join(ROOT, "helm", "stoker", "files", "rules.yaml")
DASHBOARDS = os.path.join(ROOT, "helm", "stoker", "files", "dashboards")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from dashboards import panels as drawn_panels  # noqa: E402 (every panel, those in collapsed rows too)
FAKE_UUIDS = ["GPU-0fa4e000-0000-4000-8000-000000000000", "GPU-0fa4e000-0000-4000-8000-000000000001"]
# Grafana's variables, as "All" selects them, and its interval macros at our 1-second scrape interval.
SUBSTITUTIONS = {"$__rate_interval": "20s", "$__interval": "5s", "$__range": "5m",
                 "$namespace": ".*", "$pipeline": ".*", "$pod": ".*", "$gpu": ".*"}



def stop_process(process, sig, seconds):
    """Asks a process still running to stop with `sig`, and kills it if it has not within `seconds`."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

class Failure(Exception):
    pass


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def wait_until(what, deadline_s, probe, interval=0.5):
    """Polls probe() until it returns a truthy value; raises Failure naming `what` at the deadline."""
    deadline = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = probe()
            if last:
                return last
        except (OSError, urllib.error.URLError, ValueError, KeyError) as e:
            last = e
        time.sleep(interval)
    raise Failure(f"timed out after {deadline_s} s waiting for {what} (last: {last!r})")


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def http_status(url):
    try:
        return http_get(url)[0]
    except urllib.error.HTTPError as e:
        return e.code


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeDcgm:
    """Serves DCGM_FI_PROF_SM_ACTIVE for the two fake GPUs the way dcgm-exporter labels it (UUID, gpu, ...)."""

    def __init__(self):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = "# HELP DCGM_FI_PROF_SM_ACTIVE Ratio of cycles an SM has at least 1 warp assigned.\n"
                body += "# TYPE DCGM_FI_PROF_SM_ACTIVE gauge\n"
                for i, uuid in enumerate(FAKE_UUIDS):
                    body += (f'DCGM_FI_PROF_SM_ACTIVE{{gpu="{i}",UUID="{uuid}",device="nvidia{i}",'
                             f'modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"}} {0.31 + 0.05 * i}\n')
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


class Prometheus:
    def __init__(self, workdir, targets_file, dcgm_address):
        self.dir = workdir
        os.makedirs(workdir, exist_ok=True)
        config = {
            # Scrapes every 2 s with a generous timeout, so a loaded 2-core machine does not fake a target down.
            "global": {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "1s"},
            "rule_files": [RULES],
            "scrape_configs": [
                # `job`, `namespace` and `pod` come from the targets file, as a PodMonitor would set them.
                {"job_name": "stoker", "file_sd_configs": [{"files": [targets_file], "refresh_interval": "1s"}]},
                {"job_name": "dcgm-exporter", "static_configs": [{"targets": [dcgm_address]}]},
            ],
        }
        config_path = os.path.join(workdir, "prometheus.yml")
        with open(config_path, "w") as f:
            yaml.safe_dump(config, f)
        subprocess.run(["promtool", "check", "config", config_path], check=True, stdout=subprocess.DEVNULL)
        for attempt in range(3):  # the port is picked free, then bound by Prometheus: retry if someone took it
            self.url = f"http://127.0.0.1:{free_port()}"
            self.log_file = open(os.path.join(workdir, "prometheus.log"), "w")
            self.process = subprocess.Popen(
                ["prometheus", f"--config.file={config_path}", f"--storage.tsdb.path={workdir}/data",
                 f"--web.listen-address={self.url[len('http://'):]}", "--storage.tsdb.retention.time=1h",
                 "--log.level=warn"],
                stdout=self.log_file, stderr=subprocess.STDOUT)
            try:
                wait_until("Prometheus ready", 60, lambda: self.process.poll() is None and
                           http_status(self.url + "/-/ready") == 200 or self._exited())
                return
            except Failure:
                if self.process.poll() is None or attempt == 2:
                    raise
        raise Failure("Prometheus did not start")

    def _exited(self):
        if self.process.poll() is not None:
            raise Failure("prometheus exited: " + open(os.path.join(self.dir, "prometheus.log")).read()[-2000:])
        return False

    def api(self, path, **params):
        query = urllib.parse.urlencode(params, doseq=True)
        status, body = http_get(f"{self.url}/api/v1/{path}?{query}", timeout=10)
        reply = json.loads(body)
        if reply.get("status") != "success":
            raise Failure(f"{path} {params}: {reply}")
        return reply["data"]

    def query(self, expr):
        try:
            data = self.api("query", query=expr)
        except urllib.error.HTTPError as e:
            raise Failure(f"query failed ({e.code}): {expr}\n{e.read().decode()[:500]}")
        return data["result"]

    def alerts(self):
        return self.api("alerts")["alerts"]

    def stop(self):
        stop_process(self.process, signal.SIGTERM, 20)
        self.log_file.close()


class Demo:
    def __init__(self, bin_dir, workdir, data_dir, args):
        self.targets = os.path.join(workdir, "targets.json")
        env = dict(os.environ, STOKER_NVML_LIBRARY=os.path.join(bin_dir, "libfake_nvml.so"))
        self.log_path = os.path.join(workdir, "demo.log")
        self.log_file = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [os.path.join(bin_dir, "stoker"), "demo", "--data", data_dir, "--images", "256", "--batch-size", "8",
             "--gpus", "2", "--stall-timeout", "120s", "--prometheus-targets", self.targets]
            + args, stdout=self.log_file, stderr=subprocess.STDOUT, env=env)

    def endpoints(self):
        """The targets file once it lists the coordinator, a worker and the client: {job: [address, ...]}."""
        def read():
            if self.process.poll() is not None:
                raise Failure("the demo exited early:\n" + self.output())
            with open(self.targets) as f:
                groups = json.load(f)
            jobs = {}
            for g in groups:
                jobs.setdefault(g["labels"]["job"], []).extend(g["targets"])
            return jobs if {"stoker-coordinator", "stoker-worker", "stoker-client"} <= set(jobs) else None
        return wait_until("the demo's targets file", 120, read)

    def output(self):
        with open(self.log_path, errors="replace") as f:
            return f.read().replace("\r", "\n")[-3000:]

    def stop(self):
        stop_process(self.process, signal.SIGINT, 30)
        self.log_file.close()


def check_endpoints(jobs):
    """promtool check metrics on every /metrics; /healthz, /readyz and /state answer."""
    for job, addresses in sorted(jobs.items()):
        for address in addresses:
            status, text = http_get(f"http://{address}/metrics")
            if status != 200:
                raise Failure(f"{job} {address}/metrics: HTTP {status}")
            check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
            if check.returncode != 0:
                raise Failure(f"promtool check metrics failed for {job} ({address}):\n{check.stdout}{check.stderr}")
            for path in ("/healthz", "/readyz"):
                wait_until(f"{job} {path} 200", 30, lambda: http_status(f"http://{address}{path}") == 200)
            status, state = http_get(f"http://{address}/state")
            json.loads(state)
            log(f"  {job} {address}: promtool check metrics OK ({len(text.splitlines())} lines), "
                f"healthz/readyz 200, /state is JSON ({len(state)} bytes)")


def substitute(expr):
    for key in sorted(SUBSTITUTIONS, key=len, reverse=True):
        expr = expr.replace("${" + key[1:] + "}", SUBSTITUTIONS[key]).replace(key, SUBSTITUTIONS[key])
    if "$" in re.sub(r'"\$1"', "", expr):
        raise Failure(f"unsubstituted variable in {expr}")
    return expr


def dashboard_queries():
    """(dashboard, panel title, expr) for every panel target, and (dashboard, variable, query) for variables."""
    panels, variables = [], []
    for name in sorted(os.listdir(DASHBOARDS)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(DASHBOARDS, name)) as f:
            board = json.load(f)
        for v in board["templating"]["list"]:
            if v["type"] == "datasource":
                if v["query"] != "prometheus":
                    raise Failure(f"{name}: datasource variable of type {v['query']}")
                continue
            variables.append((name, v["name"], v["definition"]))
        if "__inputs" in board:
            raise Failure(f"{name}: uses __inputs instead of a datasource variable")
        for panel in drawn_panels(board):
            if panel["datasource"] != {"type": "prometheus", "uid": "${datasource}"}:
                raise Failure(f"{name} / {panel['title']}: datasource is not the variable")
            for target in panel["targets"]:
                panels.append((name, panel["title"], target["expr"]))
    return panels, variables


def check_queries(prom, require_dcgm):
    """Every dashboard query, variable and recording rule returns data; every alert expression evaluates."""
    panels, variables = dashboard_queries()
    empty = []
    for board, title, expr in panels:
        result = prom.query(substitute(expr))
        if not result:
            empty.append(f"{board} / {title}: {expr}")
    for board, name, definition in variables:
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", definition)
        if not m:
            raise Failure(f"{board}: variable {name} is not label_values(selector, label): {definition}")
        values = prom.api(f"label/{m.group(2)}/values", **{"match[]": substitute(m.group(1))})
        if not values:
            empty.append(f"{board}: variable {name}: {definition}")
    with open(RULES) as f:
        groups = yaml.safe_load(f)["groups"]
    rules = [r for g in groups for r in g["rules"]]
    for rule in rules:
        result = prom.query(rule["expr"])  # raises on an error
        if "record" in rule:
            if not result:
                empty.append(f"recording rule {rule['record']}: {rule['expr']}")
            elif not prom.query(rule["record"]):
                empty.append(f"recording rule {rule['record']}: evaluated, but Prometheus has not recorded it")
    if empty:
        raise Failure("queries that returned nothing:\n  " + "\n  ".join(empty))
    dcgm = prom.query('DCGM_FI_PROF_SM_ACTIVE * on (UUID) group_left (pod) max by (UUID, pod) ('
                      'label_replace(stoker_client_info{gpu_uuid!=""}, "UUID", "$1", "gpu_uuid", "(.+)"))')
    if require_dcgm and len(dcgm) != 2:
        raise Failure(f"the DCGM join found {len(dcgm)} GPUs, expected 2: {dcgm}")
    log(f"  {len(panels)} panel queries, {len(variables)} variables, {len(rules)} rules: all returned data "
        f"(alerts evaluated without error); DCGM joined for {len(dcgm)} GPUs")


def stall_ratios(prom):
    result = prom.query("stoker:client_input_stall_ratio:rate2m")
    return {r["metric"].get("gpu_uuid", ""): float(r["value"][1]) for r in result}


def scenario(name, bin_dir, workdir, data_dir, demo_args, dcgm, verify, render_dir=None):
    log(f"scenario {name}: stoker demo {' '.join(demo_args)}")
    scenario_dir = os.path.join(workdir, name)
    shutil.rmtree(scenario_dir, ignore_errors=True)
    os.makedirs(scenario_dir)
    demo = Demo(bin_dir, scenario_dir, data_dir, demo_args)
    prom = None
    try:
        jobs = demo.endpoints()
        check_endpoints(jobs)
        prom = Prometheus(os.path.join(scenario_dir, "prometheus"), demo.targets, dcgm.address)
        wait_until("Prometheus scraping every target", 60, lambda: all(
            t["health"] == "up" for t in prom.api("targets")["activeTargets"]) and len(
            prom.api("targets")["activeTargets"]) >= 4)
        verify(prom, demo)
        check_queries(prom, require_dcgm=True)
        if render_dir:
            subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "render_panels.py"), "--prometheus",
                            prom.url, "--out", render_dir, "--minutes", "2"], check=True)
    except Failure:
        print("---- demo output ----\n" + demo.output(), file=sys.stderr)
        raise
    finally:
        demo.stop()
        if prom:
            prom.stop()


def verify_starved(prom, demo):
    # Both GPUs starve; then the critical alert goes pending (its `for` is 10 minutes) or fires.
    ratios = wait_until("both GPUs' stall ratio >= 20 %", 90, lambda: (
        lambda r: r if len(r) == 2 and min(r.values()) >= 0.2 else None)(stall_ratios(prom)))
    log(f"  stall ratio per GPU: {', '.join(f'{u[-4:]}={v:.1%}' for u, v in sorted(ratios.items()))}")

    def critical():
        found = [a for a in prom.alerts() if a["labels"].get("alertname") == "StokerInputStarved"
                 and a["labels"].get("severity") == "critical" and a["state"] in ("pending", "firing")]
        return found if len(found) == 2 else None
    alerts = wait_until("StokerInputStarved (critical) pending or firing for both GPUs", 60, critical)
    log(f"  alerts: {sorted((a['labels']['alertname'], a['labels']['severity'], a['state']) for a in prom.alerts())}")
    for a in alerts:
        if float(a["value"]) < 0.2:
            raise Failure(f"critical alert with value {a['value']}")
    # Let 45 s of history build up, so the panels (and their rendering) show a stretch of time, not a point.
    wait_until("45 s of recorded stall history", 120, lambda: (lambda r: len(r) == 2 and min(
        float(x["value"][1]) for x in r) >= 45)(prom.query("count_over_time(stoker:client_input_stall_ratio:rate2m[2m])")),
        interval=2)
    ratios = stall_ratios(prom)
    if len(ratios) != 2 or min(ratios.values()) < 0.2:
        raise Failure(f"starved run: stall ratios {ratios} after 45 s, expected both >= 20 %")


def verify_healthy(prom, demo):
    # After 30 recorded evaluations of both GPUs' ratio, every GPU is under 5 % and no stoker alert is active.
    wait_until("30 s of recorded stall history", 120, lambda: (lambda r: len(r) == 2 and min(
        float(x["value"][1]) for x in r) >= 30)(prom.query("count_over_time(stoker:client_input_stall_ratio:rate2m[2m])")),
        interval=2)
    ratios = stall_ratios(prom)
    log(f"  stall ratio per GPU: {', '.join(f'{u[-4:]}={v:.1%}' for u, v in sorted(ratios.items()))}")
    if len(ratios) != 2 or max(ratios.values()) >= 0.05:
        raise Failure(f"healthy run: stall ratios {ratios}, expected 2 GPUs below 5 %")
    active = [a for a in prom.alerts() if a["labels"].get("alertname", "").startswith("Stoker")]
    if active:
        raise Failure(f"healthy run: alerts active: {active}")
    log("  no stoker alert pending or firing")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", default=os.environ.get("STOKER_BIN_DIR", os.path.join(ROOT, "build", "bin")))
    parser.add_argument("--render", help="also render the overview's key panels (starved run) to PNGs here")
    parser.add_argument("--keep", help="work here and keep the logs (default: a temporary directory)")
    args = parser.parse_args()
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            print(f"{tool} not found: install Debian's prometheus package (scripts/install-deps.sh does)",
                  file=sys.stderr)
            return 1
    workdir = args.keep or tempfile.mkdtemp(prefix="stoker-observability-")
    os.makedirs(workdir, exist_ok=True)
    data_dir = os.path.join(workdir, "data")
    dcgm = FakeDcgm()
    started = time.monotonic()
    try:
        # One slow worker (20 ms more per sample: ~40 img/s) against two ranks that train 5 ms per batch of 8;
        # 60 epochs of 256 images last ~6 minutes, far more than the test needs (it stops the demo).
        scenario("starved", args.bin_dir, workdir, data_dir,
                 ["--workers", "1", "--worker-sample-delay", "20ms", "--step-ms", "5", "--epochs", "60"], dcgm,
                 verify_starved,
                 args.render)
        # Two workers (~10x the demand) against ranks that train 100 ms per batch of 8 (160 img/s in all);
        # 300 epochs last ~8 minutes, far more than the test needs.
        scenario("healthy", args.bin_dir, workdir, data_dir,
                 ["--workers", "2", "--step-ms", "100", "--epochs", "300"], dcgm, verify_healthy)
    except (Failure, subprocess.CalledProcessError) as e:
        print(f"FAILED: {e}\n(logs in {workdir})", file=sys.stderr)
        return 1
    finally:
        dcgm.close()
    log(f"PASSED in {time.monotonic() - started:.0f} s")
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
