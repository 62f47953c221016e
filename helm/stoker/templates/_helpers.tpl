{{/*
Names, labels, images and the checks that refuse a bad combination of values. Selectors use only name, instance
and component: they must never change across upgrades (a Deployment's selector is immutable), so no version.
*/}}

{{- define "stoker.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "stoker.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* A component's resource name, e.g. "release-stoker-worker"; kept to 63 characters for Service names. */}}
{{- define "stoker.componentName" -}}
{{- printf "%s-%s" (include "stoker.fullname" .root) .component | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "stoker.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every resource: call with (dict "root" $ "component" "worker"). */}}
{{- define "stoker.labels" -}}
helm.sh/chart: {{ include "stoker.chart" .root }}
{{ include "stoker.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: stoker
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "stoker.selectorLabels" -}}
app.kubernetes.io/name: {{ include "stoker.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "stoker.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "stoker.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag or repository@digest; the tag defaults to the chart's appVersion. Call with (dict "root" $ "image" .Values.worker.image). */}}
{{- define "stoker.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) }}
{{- end }}
{{- end }}

{{/* The coordinator's control endpoint as workers and clients dial it (the Service's DNS name). */}}
{{- define "stoker.coordinatorEndpoint" -}}
{{- printf "tcp://%s.%s.svc:%d" (include "stoker.componentName" (dict "root" . "component" "coordinator")) .Release.Namespace (int .Values.coordinator.ports.control) }}
{{- end }}

{{/* The workers' ceiling as the autoscaler sees it (0: no autoscaler, the replica count is fixed). */}}
{{- define "stoker.maxWorkers" -}}
{{- $a := .Values.worker.autoscaling }}
{{- if $a.hpa.enabled }}{{ $a.hpa.maxReplicas }}{{ else if $a.keda.enabled }}{{ $a.keda.maxReplicas }}{{ else }}{{ .Values.worker.replicas }}{{ end }}
{{- end }}

{{- define "stoker.hasMonitoringApi" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end }}
{{- end }}

{{/* Values the schema cannot judge alone. Included from every workload template, so a bad combination fails
the whole render with the reason. */}}
{{- define "stoker.validate" -}}
{{- $a := .Values.worker.autoscaling }}
{{- if and $a.hpa.enabled $a.keda.enabled }}
{{- fail "worker.autoscaling: enable either hpa or keda, not both — KEDA creates and owns an HPA for the worker Deployment, and two autoscalers on one Deployment fight" }}
{{- end }}
{{- if and $a.keda.enabled (not (.Capabilities.APIVersions.Has "keda.sh/v1alpha1")) }}
{{- fail "worker.autoscaling.keda.enabled needs KEDA's CRDs (keda.sh/v1alpha1), which this cluster does not have: install KEDA first, or render offline with --api-versions keda.sh/v1alpha1" }}
{{- end }}
{{- if and $a.hpa.enabled (gt (int $a.hpa.minReplicas) (int $a.hpa.maxReplicas)) }}
{{- fail "worker.autoscaling.hpa: minReplicas is greater than maxReplicas" }}
{{- end }}
{{- if and $a.keda.enabled (gt (int $a.keda.minReplicas) (int $a.keda.maxReplicas)) }}
{{- fail "worker.autoscaling.keda: minReplicas is greater than maxReplicas" }}
{{- end }}
{{- $r := .Values.worker.resources | default dict }}
{{- $req := (($r.requests | default dict).cpu) }}
{{- $lim := (($r.limits | default dict).cpu) }}
{{- if and $req $lim (gt (int (include "stoker.milliCPU" $req)) (int (include "stoker.milliCPU" $lim))) }}
{{- fail (printf "worker.resources: requests.cpu (%v) is above limits.cpu (%v), which the API server refuses: raise both (values are merged, so setting only requests keeps the default limit)" $req $lim) }}
{{- end }}
{{- end }}

{{/* A CPU quantity ("4", 4, 2.5, "500m") in millicores, for comparing requests with limits. */}}
{{- define "stoker.milliCPU" -}}
{{- $v := toString . -}}
{{- if hasSuffix "m" $v -}}{{ trimSuffix "m" $v | int }}{{- else -}}{{ mulf ($v | float64) 1000.0 | int }}{{- end -}}
{{- end }}

{{/* The pod and container security contexts shared by the coordinator and workers. */}}
{{- define "stoker.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext }}
{{- end }}

{{/* Probes on the metrics port: /healthz (the process's loops turn) and /readyz (coordinator: journal replayed;
worker: registered). Call with (dict "probe" .Values.worker.readinessProbe "path" "/readyz"). */}}
{{- define "stoker.httpProbe" -}}
httpGet:
  path: {{ .path }}
  port: metrics
{{- toYaml .probe | nindent 0 }}
timeoutSeconds: 2
{{- end }}
