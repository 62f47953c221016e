#!/usr/bin/python3
"""Renders the key panels of stoker's overview dashboard to PNG from a live Prometheus, so a reviewer can see what
an operator would see without a Grafana: each panel's queries from helm/stoker/files/dashboards/ are run over the
last few minutes through Prometheus's query_range API and drawn with matplotlib (Debian: python3-matplotlib).

    /usr/bin/python3 scripts/render_panels.py --prometheus http://127.0.0.1:9090 --out /tmp/panels [--minutes 10]

Writes one PNG per panel and overview.png with all of them. tests/observability/live_test.py --render DIR runs it
against the starved demo.
"""
import argparse
import json
import math
import os
import re
import sys
import time
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

import dashboards  # noqa: E402  (beside this script: every panel of a dashboard, rows held too)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OVERVIEW = os.path.join(ROOT, "helm", "stoker", "files", "dashboards", "stoker-overview.json")
KEY_PANELS = [
    "Input stall per GPU",
    "Step time and input wait per GPU (median)",
    "Images per second delivered",
    "Worker thread time: busy vs backpressure",
    "Workers: running, recommended, maximum",
    "Units by state",
]
VARIABLES = {"$__rate_interval": "20s", "$namespace": ".*", "$pipeline": ".*", "$pod": ".*", "$gpu": ".*"}


def substitute(expr):
    for key in sorted(VARIABLES, key=len, reverse=True):
        expr = expr.replace(key, VARIABLES[key])
    return expr


def query_range(prometheus, expr, start, end, step):
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query_range?{params}", timeout=30) as r:
        reply = json.load(r)
    if reply.get("status") != "success":
        raise RuntimeError(f"{expr}: {reply}")
    return reply["data"]["result"]


def legend(template, labels):
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template) or str(labels)


def draw(ax, panel, prometheus, start, end, step):
    unit = panel["fieldConfig"]["defaults"].get("unit", "short")
    scale = 100 if unit == "percentunit" else 1
    lines = 0
    for target in panel["targets"]:
        for series in query_range(prometheus, substitute(target["expr"]), start, end, step):
            points = [(float(t) - end, float(v) * scale) for t, v in series["values"] if not math.isnan(float(v))]
            if not points:
                continue
            xs, ys = zip(*points)
            ax.plot(xs, ys, linewidth=1.2, label=legend(target.get("legendFormat", ""), series["metric"]))
            lines += 1
    for step_ in panel["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", []):
        if step_["value"] is not None:
            ax.axhline(step_["value"] * scale, color=step_["color"], linestyle="--", linewidth=0.8)
    if panel["fieldConfig"]["defaults"].get("custom", {}).get("scaleDistribution", {}).get("type") == "log":
        ax.set_yscale("symlog")  # Grafana's log axis; symlog keeps the zeros
    ax.set_title(panel["title"], fontsize=10)
    ax.set_xlabel("seconds before now", fontsize=8)
    ax.set_ylabel({"percentunit": "%", "s": "seconds", "short": "per second", "none": ""}.get(unit, unit),
                  fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    if lines:
        ax.legend(fontsize=6, loc="upper left")
    else:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prometheus", required=True, help="Prometheus base URL")
    parser.add_argument("--out", required=True, help="directory for the PNG files")
    parser.add_argument("--minutes", type=float, default=10, help="time range to draw (default: %(default)s)")
    args = parser.parse_args()
    with open(OVERVIEW) as f:
        panels = {p["title"]: p for p in dashboards.panels(json.load(f))}
    missing = [t for t in KEY_PANELS if t not in panels]
    if missing:
        print(f"panels not in {OVERVIEW}: {missing}", file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    end = time.time()
    start = end - args.minutes * 60
    step = max(1.0, args.minutes * 60 / 300)
    fig, axes = plt.subplots(3, 2, figsize=(14, 12))
    for ax, title in zip(axes.flat, KEY_PANELS):
        draw(ax, panels[title], args.prometheus, start, end, step)
        single, single_ax = plt.subplots(figsize=(8, 4))
        n = draw(single_ax, panels[title], args.prometheus, start, end, step)
        single.tight_layout()
        name = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") + ".png"
        single.savefig(os.path.join(args.out, name), dpi=100)
        plt.close(single)
        print(f"{os.path.join(args.out, name)}: {n} series")
    fig.suptitle("stoker / overview (rendered from Prometheus)")
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "overview.png"), dpi=100)
    print(f"{os.path.join(args.out, 'overview.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
