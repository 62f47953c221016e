#!/usr/bin/env python3
"""Writes helm/stoker/values.schema.json from helm/stoker/values.yaml, so the two never drift apart.

Every object in values.yaml becomes a closed JSON-Schema object (additionalProperties: false: a misspelt key fails
`helm install`), every leaf gets the type of its default, and the table below adds what a default cannot say:
free-form maps (labels, Kubernetes objects passed through), enums, ranges and patterns. Helm validates the merged
values against this schema on install, upgrade, lint and template.

  scripts/chart_schema.py           # rewrite the schema
  scripts/chart_schema.py --check   # exit 1 if the committed schema is not what values.yaml gives (CI)
"""
import json
import pathlib
import sys

import yaml

CHART = pathlib.Path(__file__).resolve().parent.parent / "helm" / "stoker"

STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
ANY_OBJECT = {"type": "object"}
OBJECT_LIST = {"type": "array", "items": {"type": "object"}}
STRING_LIST = {"type": "array", "items": {"type": "string"}}
PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
DURATION = {"type": "string", "pattern": r"^[0-9]+(ms|s|m|h)$"}
# A team's weight: a number from 0.001 to 1000 (helm --set passes 0.5 as a string, so a numeric string is accepted too).
TEAM_MAP = {"type": "object", "propertyNames": {"pattern": r"^[A-Za-z0-9._-]{1,64}$"}}
TEAM_WEIGHTS = {**TEAM_MAP, "additionalProperties": {"type": ["number", "string"], "minimum": 0.001, "maximum": 1000,
                                         "pattern": r"^(0*[1-9][0-9]{0,2}(\.[0-9]+)?|0*\.[0-9]*[1-9][0-9]*)$"}}
RATIO = {"type": "string", "pattern": r"^(0(\.[0-9]+)?|1(\.0+)?)$"}
PULL_POLICY = {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]}
LOG_LEVEL = {"type": "string", "enum": ["debug", "info", "warning", "error"]}
DIGEST = {"type": "string", "pattern": r"^(sha256:[0-9a-f]{64})?$"}
NAME = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
# A team with a client key of its own: the key's name (client:<team>), and part of a Secret's name and a label value,
# so a DNS subdomain of at most 63 characters (a subset of what key names allow).
TEAM_NAME = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
             "maxLength": 63}
PROBE = {"type": "object", "additionalProperties": False,
         "properties": {"periodSeconds": {"type": "integer", "minimum": 1},
                        "failureThreshold": {"type": "integer", "minimum": 1},
                        "initialDelaySeconds": {"type": "integer", "minimum": 0}}}

# Paths use dots; "*" matches any one key (the two components share shapes).
OVERRIDES = {
    "commonLabels": STRING_MAP,
    "imagePullSecrets": OBJECT_LIST,
    "serviceAccount.annotations": STRING_MAP,
    "dataset.volume": ANY_OBJECT,
    "dataset.mountPath": {"type": "string", "pattern": "^/"},
    "podSecurityContext": ANY_OBJECT,
    "containerSecurityContext": ANY_OBJECT,
    "*.image.pullPolicy": PULL_POLICY,
    "*.image.digest": DIGEST,
    "*.ports.control": PORT, "*.ports.data": PORT, "*.ports.metrics": PORT,
    "*.logLevel": LOG_LEVEL,
    "*.extraArgs": STRING_LIST,
    "*.extraEnv": OBJECT_LIST,
    "*.resources": ANY_OBJECT,
    "*.podLabels": STRING_MAP,
    "*.podAnnotations": STRING_MAP,
    "*.nodeSelector": STRING_MAP,
    "*.tolerations": OBJECT_LIST,
    "*.affinity": ANY_OBJECT,
    "*.startupProbe": PROBE, "*.readinessProbe": PROBE, "*.livenessProbe": PROBE,
    "coordinator.heartbeatInterval": DURATION,
    "coordinator.leaseTtl": DURATION,
    "coordinator.clientTimeout": DURATION,
    "coordinator.jobRetention": DURATION,
    "coordinator.teamWeights": TEAM_WEIGHTS,
    "coordinator.teamPriorities": {**TEAM_MAP, "additionalProperties": {"type": "integer", "minimum": -1000,
                                                                       "maximum": 1000}},
    "coordinator.teamMaxWorkers": {**TEAM_MAP, "additionalProperties": {"type": "integer", "minimum": 1,
                                                                       "maximum": 1000000}},
    "coordinator.teamMinWorkers": {**TEAM_MAP, "additionalProperties": {"type": "integer", "minimum": 1,
                                                                       "maximum": 1000000}},
    "coordinator.terminationGracePeriodSeconds": {"type": "integer", "minimum": 1},
    "coordinator.persistence.accessModes": {"type": "array", "minItems": 1, "items": {
        "type": "string", "enum": ["ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany"]}},
    "coordinator.persistence.size": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$"},
    "objectStorage.endpoint": {"type": "string", "pattern": "^(https?://[^/]+)?$"},
    "objectStorage.addressing": {"type": "string", "enum": ["auto", "path", "virtual"]},
    "objectStorage.readAheadBytes": {"type": "integer", "minimum": 1048576},
    "objectStorage.connections": {"type": "integer", "minimum": 1, "maximum": 1024},
    "objectStorage.requestTimeout": DURATION,
    "objectStorage.retryDeadline": DURATION,
    "exampleJob.index.extraArgs": STRING_LIST,
    "exampleJob.index.resources": ANY_OBJECT,
    "exampleJob.index.url": {"type": "string", "pattern": "^((s3|https?)://.+)?$"},
    "worker.replicas": {"type": "integer", "minimum": 0},
    "worker.threads": {"type": "integer", "minimum": 0},
    "worker.drainGraceSeconds": {"type": "integer", "minimum": 1},
    "worker.terminationMarginSeconds": {"type": "integer", "minimum": 5},
    "worker.pdb.maxUnavailable": {"type": ["integer", "string"], "pattern": "^[0-9]+%$", "minimum": 1},
    "worker.topologySpread.maxSkew": {"type": "integer", "minimum": 1},
    "worker.topologySpread.whenUnsatisfiable": {"type": "string", "enum": ["DoNotSchedule", "ScheduleAnyway"]},
    "worker.autoscaling.hpa.minReplicas": {"type": "integer", "minimum": 1},
    "worker.autoscaling.hpa.maxReplicas": {"type": "integer", "minimum": 1},
    "worker.autoscaling.hpa.targetCPUUtilizationPercentage": {"type": "integer", "minimum": 1, "maximum": 100},
    "worker.autoscaling.hpa.external.averageValue": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?m?$"},
    "worker.autoscaling.hpa.behavior": ANY_OBJECT,
    "worker.autoscaling.keda.minReplicas": {"type": "integer", "minimum": 1},
    "worker.autoscaling.keda.maxReplicas": {"type": "integer", "minimum": 1},
    "worker.autoscaling.keda.pollingInterval": {"type": "integer", "minimum": 1},
    "worker.autoscaling.keda.cooldownPeriod": {"type": "integer", "minimum": 0},
    "worker.autoscaling.keda.serverAddress": {"type": "string", "pattern": "^https?://"},
    "worker.autoscaling.keda.busyRatioTarget": RATIO,
    "worker.autoscaling.keda.stallRatioTarget": {"type": "string", "pattern": r"^((0(\.[0-9]+)?|1(\.0+)?))?$"},
    "worker.autoscaling.keda.fallbackReplicas": {"type": "integer", "minimum": 0},
    "metrics.*.additionalLabels": STRING_MAP,
    "metrics.*.interval": DURATION,
    "metrics.*.scrapeTimeout": DURATION,
    "metrics.clientPodMonitor.podLabels": {**STRING_MAP, "minProperties": 1},
    "metrics.clientPodMonitor.portName": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                                          "maxLength": 15},
    "metrics.clientPodMonitor.namespaces": STRING_LIST,
    "metrics.grafanaDashboards.labels": STRING_MAP,
    "metrics.grafanaDashboards.annotations": STRING_MAP,
    "networkPolicy.clientPodLabels": {**STRING_MAP, "minProperties": 1},
    "networkPolicy.clientNamespaces": {"type": "array", "items": NAME},
    "networkPolicy.metricsNamespaces": {"type": "array", "items": NAME},
    "networkPolicy.metricsFrom": OBJECT_LIST,
    "security.teams": {"type": "array", "items": TEAM_NAME, "uniqueItems": True},
    # No pattern on the key files: helm would print the value (a secret key) in its error. The template checks them.
    # (security.keys.teams before security.keys.*: the first match wins.)
    "security.keys.teams": {"type": "object", "propertyNames": TEAM_NAME, "additionalProperties": {"type": "string"}},
    "security.keys.*": {"type": "string"},
    "security.existingSecrets.*": {"type": "string", "pattern": "^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$",
                                   "maxLength": 253},
    "security.generateKeys.image.pullPolicy": PULL_POLICY,
    "security.generateKeys.image.digest": DIGEST,
    "security.generateKeys.resources": ANY_OBJECT,
    "exampleJob.job": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"},
    "exampleJob.manifest": {"type": "string", "pattern": "^/"},
    "exampleJob.ranks": {"type": "integer", "minimum": 1},
    "exampleJob.batchSize": {"type": "integer", "minimum": 1},
    "exampleJob.epochs": {"type": "integer", "minimum": 1},
    "exampleJob.seed": {"type": "integer", "minimum": 0},
    "exampleJob.pipeline": {"type": "string", "enum": ["train", "eval"]},
    "exampleJob.holdMs": {"type": "integer", "minimum": 0},
    "exampleJob.gpusPerRank": {"type": "integer", "minimum": 0},
    "exampleJob.metricsPort": PORT,
    "exampleJob.backoffLimit": {"type": "integer", "minimum": 0},
    "exampleJob.localWorkers.threads": {"type": "integer", "minimum": 1},
    "exampleJob.localWorkers.resources": ANY_OBJECT,
    # A socket is mountPath/<pod name>.sock, at most 107 bytes; a pod name is at most 63.
    "exampleJob.localWorkers.mountPath": {"type": "string", "pattern": "^(/[A-Za-z0-9._-]+)+$", "maxLength": 38},
    "exampleJob.localWorkers.metricsPort": {"type": "integer", "minimum": 0, "maximum": 65535},
    "exampleJob.localWorkers.drainGraceSeconds": {"type": "integer", "minimum": 1, "maximum": 25},
    "exampleJob.localWorkers.logLevel": LOG_LEVEL,
    "exampleJob.localWorkers.extraArgs": STRING_LIST,
    "exampleJob.localWorkers.extraEnv": OBJECT_LIST,
    "nameOverride": {**NAME, "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$"},
    "fullnameOverride": {**NAME, "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$"},
}


def override_for(path):
    parts = path.split(".")
    for pattern, schema in OVERRIDES.items():
        p = pattern.split(".")
        if len(p) == len(parts) and all(a == "*" or a == b for a, b in zip(p, parts)):
            return schema
    return None


def schema_for(value, path=""):
    found = override_for(path) if path else None
    if found is not None:
        return found
    if isinstance(value, dict):
        return {"type": "object", "additionalProperties": False,
                "properties": {k: schema_for(v, f"{path}.{k}" if path else k) for k, v in value.items()}}
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list):
        raise SystemExit(f"chart_schema: {path} is a list with no entry in OVERRIDES; say what its items are")
    raise SystemExit(f"chart_schema: {path}: cannot type {value!r}")


def render():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    unused = [p for p in OVERRIDES if "*" not in p and not has_path(values, p.split("."))]
    if unused:
        raise SystemExit(f"chart_schema: OVERRIDES name keys values.yaml does not have: {unused}")
    schema = {"$schema": "http://json-schema.org/draft-07/schema#",
              "title": "stoker chart values (generated by scripts/chart_schema.py from values.yaml)",
              **schema_for(values)}
    return json.dumps(schema, indent=2) + "\n"


def has_path(values, parts):
    for part in parts:
        if not isinstance(values, dict) or part not in values:
            return False
        values = values[part]
    return True


def main():
    out = CHART / "values.schema.json"
    text = render()
    if "--check" in sys.argv[1:]:
        if not out.exists() or out.read_text() != text:
            print(f"{out} is stale: run scripts/chart_schema.py", file=sys.stderr)
            return 1
        print(f"{out.name} matches values.yaml")
        return 0
    out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
