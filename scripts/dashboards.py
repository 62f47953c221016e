#!/usr/bin/python3
"""Generates stoker's two Grafana dashboards into helm/stoker/files/dashboards/ (the chart ships them as
ConfigMaps; anyone can import them): the overview (which GPUs starve, throughput, worker busy vs backpressure,
replicas, units) and the GPU view (input stall beside dcgm-exporter's DCGM_FI_PROF_SM_ACTIVE, joined on gpu_uuid).

    /usr/bin/python3 scripts/dashboards.py           # write the JSON files
    /usr/bin/python3 scripts/dashboards.py --check   # exit 1 if the committed files differ from what this writes

Each dashboard has a `datasource` variable (never __inputs) and namespace / pipeline / pod / gpu variables; every
panel query uses $__rate_interval where it takes a rate. A repeated row is collapsed and holds its own panels
(`panels()` lists them all). tests/observability/live_test.py evaluates every query
against a real Prometheus scraping a live demo. Standard library only.
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "helm", "stoker", "files", "dashboards")
DS = {"type": "prometheus", "uid": "${datasource}"}

# Selectors: clients carry pipeline/rank/gpu/gpu_uuid; every target carries namespace/pod from the scraper.
CLIENT = 'namespace=~"$namespace", pipeline=~"$pipeline", pod=~"$pod", gpu=~"$gpu"'
PIPELINE = 'namespace=~"$namespace", pipeline=~"$pipeline"'
NS = 'namespace=~"$namespace"'
# Each GPU's input stall seconds over its step seconds (a recording rule's 2-minute rate): the starvation signal.
INPUT_STALL = f"stoker:client_input_stall_ratio:rate2m{{{CLIENT}}}"


def variables():
    def query(name, label, expr, hint):
        return {
            "name": name, "label": label, "type": "query", "datasource": DS,
            "definition": expr, "query": {"query": expr, "refId": "StandardVariableQuery"},
            "includeAll": True, "multi": True, "allValue": ".*", "refresh": 2, "sort": 1,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "description": hint,
        }
    return {"list": [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "current": {}, "hide": 0, "refresh": 1},
        query("namespace", "Namespace", "label_values(stoker_build_info, namespace)",
              "Kubernetes namespace of the stoker processes"),
        query("pipeline", "Pipeline", 'label_values(stoker_client_info{namespace=~"$namespace"}, pipeline)',
              "stoker job name"),
        query("pod", "Trainer pod", f'label_values(stoker_client_info{{{PIPELINE}}}, pod)',
              "training pods running the stoker client"),
        query("gpu", "GPU", f'label_values(stoker_client_info{{{PIPELINE}, pod=~"$pod"}}, gpu)',
              "CUDA ordinal within the pod"),
    ]}


class Layout:
    """Places panels left to right in a 24-column grid, starting a new line when a panel does not fit."""

    def __init__(self):
        self.x, self.y, self.row_h, self.next_id = 0, 0, 0, 1
        self.panels = []
        self.into = self.panels  # where add() puts panels: the dashboard's list, or a collapsed row's own

    def row(self, title, repeat=None):
        """A row. With `repeat` (a variable's name) Grafana shows it once per value selected, each with that value,
        collapsed (its panels held in the row, drawn when opened): a pool of 200 pipelines loads 200 rows, not 600
        panels."""
        self._newline()
        row = {"type": "row", "title": title, "id": self._id(), "collapsed": bool(repeat), "panels": [],
               "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}}
        if repeat:
            row["repeat"] = repeat
        self.panels.append(row)
        self.into = row["panels"] if repeat else self.panels
        self.y += 1

    def add(self, panel, w, h):
        if self.x + w > 24:
            self._newline()
        panel["id"] = self._id()
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.into.append(panel)
        self.x += w
        self.row_h = max(self.row_h, h)

    def _newline(self):
        if self.x:
            self.y += self.row_h
        self.x, self.row_h = 0, 0

    def _id(self):
        self.next_id += 1
        return self.next_id - 1


def panels(board):
    """Every panel of a dashboard that draws something: the top level's and those collapsed rows hold."""
    for panel in board["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def targets(queries):
    return [{"refId": chr(ord("A") + i), "datasource": DS, "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(queries)]


def rate(counter, selector, by=None):
    """The per-second rate of a counter over Grafana's rate interval, summed (per `by` labels, if given)."""
    grouping = f" by ({by}) " if by else ""
    return f"sum{grouping}(rate({counter}{{{selector}}}[$__rate_interval]))"


STAGES = "stoker_coordinator_job_stage_seconds_total"
LEASED = "stoker_coordinator_job_samples_leased_total"
# Each pipeline's input stall under the cause the coordinator names (the cause's series is 1, the others 0).
STALL_BY_CAUSE = (f"stoker_coordinator_input_bottleneck{{{PIPELINE}}} * ignoring (cause) group_left "
                  f"stoker_coordinator_input_stall_ratio{{{PIPELINE}}}")


def per_stage(per_pipeline):
    """Each pipeline's seconds by stage per second, over `per_pipeline` (an expression by pipeline)."""
    return f"{rate(STAGES, PIPELINE, by='pipeline, stage')} / ignoring (stage) group_left {per_pipeline}"


def stage_shares():
    """Each pipeline's split of its batches' time by stage."""
    return per_stage(rate(STAGES, PIPELINE, by="pipeline"))


def quantile(q, histogram, selector, by=None):
    """The q-quantile of a histogram's observations over Grafana's rate interval (per `by` labels, if given)."""
    labels = f"le, {by}" if by else "le"
    return f"histogram_quantile({q}, {rate(histogram + '_bucket', selector, by=labels)})"


def timeseries(title, description, queries, unit, maximum=None, thresholds=None, log=False):
    defaults = {"unit": unit, "min": 0, "custom": {"lineWidth": 1, "fillOpacity": 10, "showPoints": "never"}}
    if log:
        defaults["min"] = 1
        defaults["custom"]["scaleDistribution"] = {"type": "log", "log": 10}
    if maximum is not None:
        defaults["max"] = maximum
    if thresholds:
        defaults["thresholds"] = thresholds
        defaults["custom"]["thresholdsStyle"] = {"mode": "dashed"}
    return {"type": "timeseries", "title": title, "description": description, "datasource": DS,
            "targets": targets(queries), "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]},
                        "tooltip": {"mode": "multi", "sort": "desc"}}}


def stat(title, description, queries, unit, thresholds=None):
    defaults = {"unit": unit}
    if thresholds:
        defaults["thresholds"] = thresholds
    return {"type": "stat", "title": title, "description": description, "datasource": DS,
            "targets": targets(queries), "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "background", "graphMode": "area", "textMode": "value_and_name"}}


def steps(*pairs):
    return {"mode": "absolute",
            "steps": [{"color": color, "value": value} for value, color in pairs]}


STARVATION = steps((None, "green"), (0.05, "orange"), (0.2, "red"))


def input_stall_per_gpu(description):
    """The panel both dashboards show, each with a description that reads it beside its own neighbours."""
    return timeseries("Input stall per GPU", description, [(INPUT_STALL, "{{pod}} gpu {{gpu}} rank {{rank}}")],
                      "percentunit", 1, STARVATION)


def dashboard(uid, title, description, layout):
    return {
        "uid": uid, "title": title, "description": description, "tags": ["stoker"], "editable": True,
        "schemaVersion": 39, "version": 1, "refresh": "30s", "timezone": "browser",
        "time": {"from": "now-1h", "to": "now"}, "graphTooltip": 1,
        "templating": variables(), "annotations": {"list": []}, "links": [],
        "panels": layout.panels,
    }


def overview():
    l = Layout()
    l.row("Are the GPUs waiting for input?")
    l.add(stat("Worst GPU input stall",
               "Highest per-GPU input stall over the last 2 minutes: the share of step time a GPU sat idle because "
               "its next batch had not arrived. Orange from 5 %, red from 20 % (the alert thresholds).",
               [(f"max({INPUT_STALL})", "worst GPU")],
               "percentunit", STARVATION), 6, 5)
    l.add(stat("Input stall per pipeline",
               "Step-time-weighted input stall of each pipeline over 2 minutes.",
               [(f"stoker:pipeline_input_stall_ratio:rate2m{{{PIPELINE}}}", "{{pipeline}}")],
               "percentunit", STARVATION), 6, 5)
    l.add(stat("Workers: running / recommended",
               "Active workers, and how many the coordinator estimates the current demand needs (demanded "
               "samples/s over the mean worker's measured rate).",
               [(f'sum(stoker_coordinator_workers{{{NS}, state="active"}})', "running"),
                (f"max(stoker_coordinator_recommended_workers{{{NS}}})", "recommended")],
               "none"), 6, 5)
    l.add(stat("Longest time without a batch",
               "Seconds since a running client last received a batch (alert at 5 minutes).",
               [(f"max(stoker:client_seconds_since_last_batch{{{CLIENT}}})", "max")],
               "s", steps((None, "green"), (60, "orange"), (300, "red"))), 6, 5)
    l.add(input_stall_per_gpu("Per GPU: input stall seconds over training-step seconds (2-minute rate). This is the "
                              "starvation signal: the GPU had nothing to run because the batch was late."), 12, 8)
    l.add(timeseries("Step time and input wait per GPU (median)",
                     "Median time between consecutive batches (the training step as the input side sees it) and "
                     "median wait in next() per batch.",
                     [(quantile(0.5, "stoker_client_step_seconds", CLIENT, by="pod, gpu"), "step {{pod}} gpu {{gpu}}"),
                      (quantile(0.5, "stoker_client_input_wait_seconds", CLIENT, by="pod, gpu"),
                       "wait {{pod}} gpu {{gpu}}")],
                     "s"), 12, 8)
    l.row("Throughput")
    l.add(timeseries("Images per second delivered",
                     "Samples handed to training per second, per pipeline.",
                     [(rate("stoker_client_samples_total", CLIENT, by="pipeline"), "{{pipeline}}")],
                     "short"), 12, 8)
    l.add(timeseries("Worker supply vs client demand",
                     "Samples/s the workers produce, and the rate the clients would consume if never starved "
                     "(coordinator's demand estimate).",
                     [(rate("stoker_worker_samples_total", NS), "workers produce"),
                      (f"sum(stoker_coordinator_demand_samples_per_second{{{PIPELINE}}})", "clients demand")],
                     "short"), 12, 8)
    l.row("Sharing the pool between jobs")
    l.add(timeseries("Share of the pool by team",
                     "Each team's part of the samples the workers were given to make (a team is the name of its "
                     "client key). With every team waiting, the parts follow the teams' weights "
                     "(coordinator.teamWeights); a team that needs less leaves the rest to the others.",
                     [(f"{rate(LEASED, NS, by='team')} / ignoring (team) group_left {rate(LEASED, NS)}",
                       "{{team}}")],
                     "percentunit", 1), 8, 8)
    l.add(timeseries("Samples leased per pipeline",
                     "Samples per second the workers were given to make for each pipeline, and its team: within a "
                     "team, its pipelines share its part equally unless one needs less.",
                     [(rate(LEASED, PIPELINE, by="pipeline, team"), "{{pipeline}} ({{team}})")],
                     "short"), 8, 8)
    l.add(timeseries("Which pipeline waits for input, and why",
                     "Each pipeline's input stall under the cause the coordinator names while it is 3 % or more: "
                     "cap (its team wants more than coordinator.teamMaxWorkers allows), workers (the pool is "
                     "busy: add workers, or weigh the team higher), window (raise the clients' prefetch), "
                     "scheduling (report it). 0 under the other causes.",
                     [(STALL_BY_CAUSE, "{{pipeline}}: {{cause}}")],
                     "percentunit", 1), 8, 8)
    l.add(timeseries("Where each pipeline's batches' time goes, by stage",
                     "Of the time each pipeline's batches spent on their way, the part each stage took: on the "
                     "pool's workers read (storage), decode and augment (CPU: more workers, or a cheaper "
                     "pipeline), seal (encryption); on the clients receive (opening, copying into pinned memory) "
                     "and h2d (the copy to the GPU). From the workers' unit reports and the clients' heartbeats.",
                     [(stage_shares(), "{{pipeline}}: {{stage}}")],
                     "percentunit", 1), 12, 8)
    l.add(timeseries("Time per sample by pipeline and stage",
                     "About the seconds one of the pipeline's samples takes in each stage (the workers' a little "
                     "low: node-local workers' and re-leased samples count below the line only): what its share of "
                     "the pool buys (a pipeline whose samples cost twice as much gets half the samples for the same "
                     "share), and what its clients spend on each.",
                     [(per_stage(rate(LEASED, PIPELINE, by="pipeline")), "{{pipeline}}: {{stage}}")],
                     "s"), 12, 8)
    l.row("Workers")
    l.add(timeseries("Worker thread time: busy vs backpressure",
                     "Share of pipeline-thread time spent making samples (busy: the autoscaling signal) and "
                     "idle for lack of client credit (backpressure: more workers than the GPUs need).",
                     [(f"stoker:workers_busy_ratio:rate2m{{{NS}}}", "busy {{namespace}}"),
                      (f"stoker:workers_backpressure_ratio:rate2m{{{NS}}}", "backpressure {{namespace}}")],
                     "percentunit", 1), 12, 8)
    l.add(timeseries("Workers: running, recommended, maximum",
                     "Worker replicas by state, the coordinator's recommendation, and the autoscaler's ceiling.",
                     [(f"sum by (state) (stoker_coordinator_workers{{{NS}}})", "{{state}}"),
                      (f"max(stoker_coordinator_recommended_workers{{{NS}}})", "recommended"),
                      (f"max(stoker_coordinator_max_workers{{{NS}}})", "maximum")],
                     "none"), 12, 8)
    l.add(timeseries("Worker time per batch by stage (median)",
                     "Thread seconds a batch's samples spent reading, decoding and augmenting, and seconds to "
                     "collate and send it: read-heavy means storage, decode/augment-heavy means CPU.",
                     [(quantile(0.5, "stoker_worker_stage_seconds", NS, by="stage"), "{{stage}}")],
                     "s"), 12, 8)
    l.add(timeseries("Bad input by reason",
                     "Samples quarantined (unreadable, undecodable, truncated) and frames refused, per second.",
                     [(rate("stoker_worker_errors_total", NS, by="reason"), "{{reason}}")],
                     "short"), 12, 8)
    l.row("Object storage (datasets on S3 or HTTP)")
    l.add(timeseries("Storage requests by status",
                     "Requests (tries) per second the workers made to object storage, by HTTP status or transport "
                     "failure (timeout, connect, reset): 206 is a range read served.",
                     [(rate("stoker_worker_storage_requests_total", NS, by="status"), "{{status}}")],
                     "reqps"), 8, 8)
    l.add(timeseries("Storage error ratio and retries",
                     "Share of requests that failed (5xx, slow-downs, 403/404, resets, timeouts; alert above 5 % for "
                     "10 minutes), retries per second by reason, and reads that failed for good (their units are "
                     "handed back, never dropped).",
                     [(f"stoker:storage_error_ratio:rate5m{{{NS}}}", "error ratio {{namespace}}"),
                      (rate("stoker_worker_storage_retries_total", NS, by="reason"), "retries: {{reason}}"),
                      (rate("stoker_worker_storage_failures_total", NS, by="reason"), "failed: {{reason}}")],
                     "short"), 8, 8)
    l.add(timeseries("Storage request latency",
                     "Median and 99th-percentile seconds per request to object storage.",
                     [(quantile(0.5, "stoker_worker_storage_request_seconds", NS), "p50"),
                      (quantile(0.99, "stoker_worker_storage_request_seconds", NS), "p99")],
                     "s"), 8, 8)
    l.add(timeseries("Read-ahead depth and memory",
                     "Per worker: units being read ahead of the pipeline (the depth), and bytes fetched ahead and "
                     "not yet used against the --read-ahead-bytes cap.",
                     [(f"stoker_worker_storage_read_ahead_units{{{NS}}}", "units {{pod}}"),
                      (f"stoker_worker_storage_read_ahead_bytes{{{NS}}} / "
                       f"stoker_worker_storage_read_ahead_limit_bytes{{{NS}}}", "memory used / cap {{pod}}")],
                     "short"), 12, 8)
    l.add(timeseries("Bytes read from object storage",
                     "Body bytes per second the workers received from object storage.",
                     [(rate("stoker_worker_storage_bytes_total", NS), "bytes/s")],
                     "Bps"), 12, 8)
    l.row("Coordinator")
    l.add(timeseries("Units by state",
                     "Work units of every epoch of the job: pending (future epochs included, hence the log "
                     "scale), leased to a worker, sent and awaiting acknowledgement, committed.",
                     [(f"sum by (state) (stoker_coordinator_units{{{PIPELINE}}})", "{{state}}")],
                     "none", log=True), 8, 8)
    l.add(timeseries("Re-leases by reason",
                     "Units handed to another worker: a worker lost, a lease expired, a drain, unacknowledged "
                     "batches. Each is recovered work, never lost work.",
                     [(f"sum by (reason) (increase(stoker_coordinator_releases_total{{{NS}}}[$__rate_interval]))",
                       "{{reason}}")],
                     "none"), 8, 8)
    l.add(timeseries("Epoch progress",
                     "Current epoch plus the committed fraction of it, per pipeline.",
                     [(f"stoker_coordinator_epoch{{{PIPELINE}}} + stoker_coordinator_epoch_progress_ratio{{{PIPELINE}}}",
                       "{{pipeline}}")],
                     "none"), 8, 8)
    l.add(timeseries("Control-plane requests",
                     "Coordinator requests per second by method, and the 99th-percentile handling time.",
                     [(rate("stoker_coordinator_requests_total", NS, by="method"), "{{method}}"),
                      (quantile(0.99, "stoker_coordinator_request_seconds", NS), "p99 seconds")],
                     "short"), 16, 8)
    l.add(timeseries("Journal volume",
                     "Free share of the coordinator's journal volume, and whether the journal takes writes (1) or "
                     "not (0: a full volume or an I/O error; replies are held and training pauses until it does).",
                     [(f"min(stoker_coordinator_journal_volume_free_bytes{{{NS}}} / "
                       f"stoker_coordinator_journal_volume_size_bytes{{{NS}}})", "free"),
                      (f"min(stoker_coordinator_journal_writable{{{NS}}})", "writable")],
                     "percentunit", 1), 8, 8)
    pipeline_rows(l)
    return dashboard("stoker-overview", "stoker / overview",
                     "Which GPUs wait for input, and whether it is for lack of workers.", l)


def pipeline_rows(l):
    """A row per pipeline selected: what it gets against what it would take, whether it waits and why, and which
    stage of its batches' way the time goes to. In a repeated row, $pipeline is the row's one pipeline."""
    l.row("Pipeline $pipeline", repeat="pipeline")
    l.add(timeseries("$pipeline: samples leased and demanded",
                     "Samples per second the pool's workers were given to make for it (its share), and what its "
                     "training loops would consume if input never stalled (its demand). Below its demand with "
                     "input stall: it is held to its share, or the pool is short.",
                     [(rate(LEASED, PIPELINE), "leased"),
                      (f"sum(stoker_coordinator_demand_samples_per_second{{{PIPELINE}}})", "demand")],
                     "short"), 8, 8)
    l.add(timeseries("$pipeline: input stall and its cause",
                     "Its GPUs' input stall (the worst rank's), under the cause the coordinator names while it is "
                     "3 % or more: cap, workers, window or scheduling (\"Which pipeline waits for input, and why\").",
                     [(f"stoker_coordinator_input_stall_ratio{{{PIPELINE}}}", "stall"),
                      (STALL_BY_CAUSE, "{{cause}}")],
                     "percentunit", 1, STARVATION), 8, 8)
    l.add(timeseries("$pipeline: a batch's time by stage",
                     "Of the time its batches spent on their way, the part each stage took, workers' then "
                     "clients': read, decode, augment, seal, receive, h2d. The largest is where to look first.",
                     [(stage_shares(), "{{stage}}")],
                     "percentunit", 1), 8, 8)


def gpu_view():
    l = Layout()
    # dcgm-exporter labels GPUs by UUID; stoker_client_info labels them by gpu_uuid with the trainer's pod and GPU
    # ordinal. Copying gpu_uuid into UUID and joining keeps DCGM's value with stoker's labels. The right side must
    # be one series per UUID: clients without a UUID are left out, and two clients feeding one GPU (a train and an
    # eval loader, several ranks) are folded into one.
    join = (f'* on (UUID) group_left (pod, gpu) max by (UUID, pod, gpu) ('
            f'label_replace(stoker_client_info{{{CLIENT}, gpu_uuid!=""}}, "UUID", "$1", "gpu_uuid", "(.+)"))')
    l.row("Busy, or waiting for input?")
    l.add(timeseries("SM active (DCGM) of GPUs fed by stoker",
                     "dcgm-exporter's DCGM_FI_PROF_SM_ACTIVE: the fraction of time at least one warp was resident "
                     "on an SM, averaged over SMs. The GPU's real activity, unlike NVML utilisation.",
                     [(f"DCGM_FI_PROF_SM_ACTIVE {join}", "{{pod}} gpu {{gpu}}")],
                     "percentunit", 1), 12, 9)
    l.add(input_stall_per_gpu("Share of step time each GPU waited for its next batch. High stall with low SM "
                              "activity: starved by input. Low stall with low SM activity: the model itself (small "
                              "batches, synchronisation, communication)."), 12, 9)
    l.add({"type": "table", "title": "Per GPU: SM active, input stall, step time",
           "description": "One row per GPU fed by stoker, joined with DCGM on the GPU's UUID.",
           "datasource": DS,
           # Every query reduced to (pod, gpu), so Grafana's merge makes one row per GPU.
           "targets": [dict(t, format="table", instant=True) for t in targets([
               (f"max by (pod, gpu) (DCGM_FI_PROF_SM_ACTIVE {join})", ""),
               (f"max by (pod, gpu) ({INPUT_STALL})", ""),
               (rate("stoker_client_step_seconds_sum", CLIENT, by="pod, gpu") + " / "
                + rate("stoker_client_step_seconds_count", CLIENT, by="pod, gpu"), "")])],
           "transformations": [{"id": "merge", "options": {}},
                               {"id": "organize", "options": {"excludeByName": {"Time": True, "__name__": True}}}],
           "fieldConfig": {"defaults": {}, "overrides": []}, "options": {"showHeader": True}}, 24, 8)
    l.row("Feeding each GPU")
    l.add(timeseries("Input wait vs input stall per GPU",
                     "Wait: time next() blocked. Stall: the part of it during which the GPU had drained its work. "
                     "Wait without stall is hidden by prefetch and costs nothing.",
                     [(f"stoker:client_input_wait_ratio:rate2m{{{CLIENT}}}", "wait {{pod}} gpu {{gpu}}"),
                      (INPUT_STALL, "stall {{pod}} gpu {{gpu}}")],
                     "percentunit", 1), 12, 8)
    l.add(timeseries("Prefetch buffer fill",
                     "Ready batches held per GPU over the configured depth: near 0 while starving, full while the "
                     "GPU is the bottleneck.",
                     [(f"stoker_client_prefetch_batches{{{CLIENT}}} / stoker_client_prefetch_capacity_batches{{{CLIENT}}}",
                       "{{pod}} gpu {{gpu}}")],
                     "percentunit", 1), 12, 8)
    l.add(timeseries("Host-to-device bytes per second",
                     "Bytes copied to each GPU by the client (zero on the host path).",
                     [(rate("stoker_client_h2d_bytes_total", CLIENT, by="pod, gpu"), "{{pod}} gpu {{gpu}}")],
                     "Bps"), 8, 8)
    l.add(timeseries("Received from workers per second",
                     "Pixel bytes each client received over the network.",
                     [(rate("stoker_client_received_bytes_total", CLIENT, by="pod, gpu"), "{{pod}} gpu {{gpu}}")],
                     "Bps"), 8, 8)
    l.add(timeseries("NVML utilisation and memory",
                     "NVML's coarse utilisation (a kernel ran during the sample period: context, not the "
                     "starvation signal) and memory used, for GPUs the client process feeds.",
                     [(f'stoker_gpu_utilization_ratio{{{NS}, pod=~"$pod", gpu=~"$gpu"}}', "util {{pod}} gpu {{gpu}}"),
                      (f'stoker_gpu_memory_used_bytes{{{NS}, pod=~"$pod", gpu=~"$gpu"}}'
                       f' / stoker_gpu_memory_total_bytes{{{NS}, pod=~"$pod", gpu=~"$gpu"}}',
                       "memory {{pod}} gpu {{gpu}}")],
                     "percentunit", 1), 8, 8)
    return dashboard("stoker-gpu", "stoker / GPUs",
                     "Each GPU's input stall beside its DCGM SM activity, joined on the GPU's UUID.", l)


def render():
    return {"stoker-overview.json": overview(), "stoker-gpu.json": gpu_view()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the files on disk are not current")
    parser.add_argument("--out", default=OUT_DIR, help="directory to write (default: %(default)s)")
    args = parser.parse_args()
    stale = []
    for name, board in render().items():
        text = json.dumps(board, indent=2, sort_keys=False) + "\n"
        path = os.path.join(args.out, name)
        if args.check:
            try:
                with open(path) as f:
                    current = f.read()
            except OSError:
                current = None
            if current != text:
                stale.append(path)
            continue
        os.makedirs(args.out, exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        print(f"wrote {path}")
    if stale:
        print("out of date (run /usr/bin/python3 scripts/dashboards.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
