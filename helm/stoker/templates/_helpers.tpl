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
{{- if .Values.security.plainData }}
{{- fail "security.plainData is retired: batches are always sealed (AES-256-GCM, keyed per connection) at about the cost of a copy; remove the value (security.curve=false turns all security off, on a network you trust only)" }}
{{- end }}
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
{{- include "stoker.validateCPU" (dict "path" "worker.resources" "resources" .Values.worker.resources) }}
{{- $l := .Values.exampleJob.localWorkers }}
{{- if and .Values.exampleJob.enabled $l.enabled }}
{{- include "stoker.validateCPU" (dict "path" "exampleJob.localWorkers.resources" "resources" $l.resources) }}
{{- if eq (int $l.metricsPort) (int .Values.exampleJob.metricsPort) }}
{{- fail (printf "exampleJob.localWorkers.metricsPort (%d) is the trainer's metrics port: the two containers share the pod's network, give the sidecar another (or 0 for none)" (int $l.metricsPort)) }}
{{- end }}
{{- if not (or .Values.podSecurityContext.runAsUser .Values.containerSecurityContext.runAsUser) }}
{{- fail "exampleJob.localWorkers needs a fixed user: the node-local worker and the trainer share the group file in their emptyDir, which each refuses unless it is owned by its own UID, so set podSecurityContext.runAsUser (both containers then run as that user)" }}
{{- end }}
{{- end }}
{{- include "stoker.validateSecurity" . }}
{{- end }}

{{/* A container's CPU request must not be above its limit (the API server refuses it). Call with
(dict "path" "worker.resources" "resources" .Values.worker.resources). */}}
{{- define "stoker.validateCPU" -}}
{{- $r := .resources | default dict }}
{{- $req := (($r.requests | default dict).cpu) }}
{{- $lim := (($r.limits | default dict).cpu) }}
{{- if and $req $lim (gt (int (include "stoker.milliCPU" $req)) (int (include "stoker.milliCPU" $lim))) }}
{{- fail (printf "%s: requests.cpu (%v) is above limits.cpu (%v), which the API server refuses: raise both (values are merged, so setting only requests keeps the default limit)" .path $req $lim) }}
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
worker: registered). Call with (dict "probe" .Values.worker.readinessProbe "path" "/readyz"), and "port" for a
metrics port not named `metrics`. */}}
{{- define "stoker.httpProbe" -}}
httpGet:
  path: {{ .path }}
  port: {{ .port | default "metrics" }}
{{- toYaml .probe | nindent 0 }}
timeoutSeconds: 2
{{- end }}

{{/* The admin port (/metrics, /healthz, /readyz, /state) on the pod's IP, where the kubelet probes and Prometheus
scrapes, and on 127.0.0.1, where kubectl port-forward arrives: nowhere else the pod may have an interface. Call with
the port; the container's env lists stoker.podIpEnv first, whose $(POD_IP) the kubelet expands; port 0: none. */}}
{{- define "stoker.adminListen" -}}
{{- if gt (int .) 0 -}}
$(POD_IP):{{ . }},127.0.0.1:{{ . }}
{{- end -}}
{{- end }}
{{- define "stoker.podIpEnv" -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}

{{/* CURVE for one component's pod: its role's key (a Secret, mounted read-only) and the trust file (a
ConfigMap), named to the process by STOKER_KEY_FILE and STOKER_TRUST_FILE; with security.curve false, STOKER_INSECURE.
Call with (dict "root" $ "role" "worker"). */}}
{{- define "stoker.securityEnv" -}}
{{- if .root.Values.security.curve -}}
- name: STOKER_KEY_FILE
  value: /etc/stoker/key/key
- name: STOKER_TRUST_FILE
  value: /etc/stoker/trust/trust
{{- else -}}
- name: STOKER_INSECURE
  value: "true"
{{- end }}
{{- end }}

{{- define "stoker.securityMounts" -}}
{{- if .root.Values.security.curve -}}
- name: stoker-key
  mountPath: /etc/stoker/key
  readOnly: true
- name: stoker-trust
  mountPath: /etc/stoker/trust
  readOnly: true
{{- end }}
{{- end }}

{{- define "stoker.securityVolumes" -}}
{{- if .root.Values.security.curve -}}
{{- $existing := get .root.Values.security.existingSecrets .role -}}
- name: stoker-key
  secret:
    secretName: {{ $existing | default (include "stoker.componentName" (dict "root" .root "component" (printf "%s-key" .role))) }}
    defaultMode: 0440
    items:
      - key: key
        path: key
- name: stoker-trust
  configMap:
    name: {{ include "stoker.componentName" (dict "root" .root "component" "trust") }}
{{- end }}
{{- end }}

{{/* "true" when the release makes its own keys at install (templates/keys-job.yaml): CURVE on, key generation
on, and neither a key (a team's included), a Secret of your own nor a trust file given. */}}
{{- define "stoker.generateKeys" -}}
{{- $s := .Values.security }}
{{- $given := or $s.trust (or $s.keys.coordinator $s.keys.worker $s.keys.client $s.keys.teams) (or $s.existingSecrets.coordinator $s.existingSecrets.worker $s.existingSecrets.client) }}
{{- if and $s.curve $s.generateKeys.enabled (not $given) }}true{{ end }}
{{- end }}

{{/* With CURVE on, every role the release runs needs its key and the trust file: refuse to render without them,
saying how to make them, unless the release makes them itself. Call with the root context. */}}
{{- define "stoker.validateSecurity" -}}
{{- $s := .Values.security }}
{{- /* A team's key must be its alone: the example Job's client key is named after the release (made here) or as
its file says (yours), and an identity is a key's name. */}}
{{- $example := ternary .Release.Name (regexFind "(?m)^name = \\S+$" ($s.keys.client | default "") | trimPrefix "name = ") (not $s.keys.client) }}
{{- range $team := include "stoker.teams" . | fromJsonArray }}
{{- if eq $team $example }}
{{- fail (printf "team %s has the name of the example Job's client key (client:%s), so that key would act as the team: name the team otherwise" $team $team) }}
{{- end }}
{{- end }}
{{- if and $s.curve (not (include "stoker.generateKeys" .)) }}
{{- $roles := list "coordinator" "worker" }}
{{- if .Values.exampleJob.enabled }}{{ $roles = append $roles "client" }}{{ end }}
{{- range $roles }}
{{- $key := get $s.keys . }}
{{- if and (not $key) (not (get $s.existingSecrets .)) }}
{{- fail (printf "security.curve is on but the %s has no key: make one with `stoker keygen --role %s --out keys --trust keys/trust` and pass --set-file security.keys.%s=keys/%s-default.key (or name a Secret in security.existingSecrets.%s), or give no key, Secret or trust file at all and leave security.generateKeys.enabled on to have the chart make them at install; security.curve=false turns CURVE off on a network you trust" . . . . .) }}
{{- end }}
{{- if and $key (not (regexMatch (printf "(?m)^role = %s$" .) $key)) }}
{{- fail (printf "security.keys.%s is not a %s key file (stoker keygen --role %s writes one)" . . .) }}
{{- end }}
{{- if and $key (not (regexMatch "(?m)^secret = \\S{40}$" $key)) }}
{{- fail (printf "security.keys.%s has no secret key line: pass the file stoker keygen wrote, whole (its text is not shown here)" .) }}
{{- end }}
{{- end }}
{{- if not (regexMatch "(?m)^coordinator [A-Za-z0-9._-]+ " $s.trust) }}
{{- fail "security.curve is on but security.trust lists no coordinator key: pass the trust file stoker keygen appends to (--set-file security.trust=keys/trust), with the coordinator's, the workers' and the clients' public keys" }}
{{- end }}
{{- include "stoker.validateTeamKeys" . }}
{{- end }}
{{- end }}

{{/* Team keys of your own (security.keys.teams): each a whole client key file named as its team (the name is the
identity client:<team> the coordinator's shares go by), listed in security.trust, and every team in security.teams
has one. Errors never show a secret key's text; a public key may be shown. Call with the root context. */}}
{{- define "stoker.validateTeamKeys" -}}
{{- $s := .Values.security }}
{{- range $team := $s.teams }}
{{- if not (hasKey ($s.keys.teams | default dict) $team) }}
{{- fail (printf "security.teams names %s, but the chart makes no keys when you give yours, so give its key too: stoker keygen --role client --name %s --out keys --trust keys/trust, then --set-file security.keys.teams.%s=keys/client-%s.key and the trust file again" $team $team $team $team) }}
{{- end }}
{{- end }}
{{- range $team, $key := $s.keys.teams }}
{{- if not (regexMatch "(?m)^role = client$" $key) }}
{{- fail (printf "security.keys.teams.%s is not a client key file (stoker keygen --role client --name %s writes one)" $team $team) }}
{{- end }}
{{- if not (regexMatch (printf "(?m)^name = %s$" (regexQuoteMeta $team)) $key) }}
{{- fail (printf "security.keys.teams.%s is another team's key: a team is its key's name (client:<name>), so make it with stoker keygen --role client --name %s" $team $team) }}
{{- end }}
{{- if not (regexMatch "(?m)^secret = \\S{40}$" $key) }}
{{- fail (printf "security.keys.teams.%s has no secret key line: pass the file stoker keygen wrote, whole (its text is not shown here)" $team) }}
{{- end }}
{{- $public := regexFind "(?m)^public = \\S{40}$" $key | trimPrefix "public = " }}
{{- if not (regexMatch (printf "(?m)^client %s %s[ \\t]*$" (regexQuoteMeta $team) (regexQuoteMeta $public)) $s.trust) }}
{{- fail (printf "security.trust does not list team %s's key, so the coordinator would refuse its trainers: add the line `client %s %s` (stoker keygen --trust appends it) and pass the trust file again" $team $team $public) }}
{{- end }}
{{- end }}
{{- end }}

{{/* The Secret holding a team's client key (key `key`), <release>-stoker-client-<team>-key: not cut to 63
characters as component names are (a Secret's name may be 253 long; a cut one could be another team's). Call with
(dict "root" $ "team" "team-a"). */}}
{{- define "stoker.teamKeySecret" -}}
{{- printf "%s-client-%s-key" (include "stoker.fullname" .root) .team }}
{{- end }}

{{/* The teams with client keys of their own, as a sorted JSON list: security.teams and those of security.keys.teams.
*/}}
{{- define "stoker.teams" -}}
{{- concat (.Values.security.teams | default list) (keys (.Values.security.keys.teams | default dict)) | uniq | sortAlpha | toJson }}
{{- end }}

{{/* A pod annotation that changes with its role's key and the trust file, so a new key or trust list rolls the
pods (each process reads them once, at start); the coordinator's also with the teams, whose keys it alone trusts
(an upgrade that adds a team has the key hook list the team's new key). Call with (dict "root" $ "role" "worker"). */}}
{{- define "stoker.securityChecksum" -}}
{{- $s := .root.Values.security }}
{{- $teams := ternary (include "stoker.teams" .root) "" (eq .role "coordinator") }}
stoker.io/security-checksum: {{ printf "%v/%s/%s/%s%s" $s.curve (get $s.keys .role) (get $s.existingSecrets .role) $s.trust $teams | sha256sum | trunc 16 | quote }}
{{- end }}

{{/* The Secret holding the object-storage credentials (keys AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and optionally
AWS_SESSION_TOKEN): yours (objectStorage.credentials.existingSecret) or the chart's; empty when neither. */}}
{{- define "stoker.objectStorageSecret" -}}
{{- $c := .Values.objectStorage.credentials -}}
{{- if $c.existingSecret -}}{{ $c.existingSecret }}
{{- else if $c.accessKeyId -}}{{ include "stoker.componentName" (dict "root" . "component" "object-storage") }}
{{- end -}}
{{- end }}

{{/* Environment for reading datasets on object storage (workers and the index Job): the endpoint, region and
addressing as values, the credentials from the Secret — never a value in the pod spec. */}}
{{- define "stoker.objectStorageEnv" -}}
{{- $o := .Values.objectStorage }}
{{- with $o.endpoint }}
- name: STOKER_S3_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- with $o.region }}
- name: STOKER_S3_REGION
  value: {{ . | quote }}
{{- end }}
- name: STOKER_S3_ADDRESSING
  value: {{ $o.addressing | quote }}
- name: STOKER_STORAGE_CONNECTIONS
  value: {{ $o.connections | quote }}
- name: STOKER_STORAGE_REQUEST_TIMEOUT
  value: {{ $o.requestTimeout | quote }}
- name: STOKER_STORAGE_RETRY_DEADLINE
  value: {{ $o.retryDeadline | quote }}
{{- with (include "stoker.objectStorageSecret" .) }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: AWS_ACCESS_KEY_ID
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: AWS_SECRET_ACCESS_KEY
- name: AWS_SESSION_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: AWS_SESSION_TOKEN
      optional: true
{{- end }}
{{- end }}

{{/* What a worker needs to read the dataset, for the worker Deployment and the example Job's node-local workers:
the manifest root, the object-storage settings and credentials (stoker.objectStorageEnv), the dataset volume and
its read-only mount. Call each with the root context. */}}
{{- define "stoker.workerDatasetEnv" -}}
{{- with .Values.dataset.manifestRoot -}}
- name: STOKER_MANIFEST_ROOT
  value: {{ . | quote }}
{{ end -}}
# Datasets on object storage: read by range; the read-ahead counts toward the memory limit.
- name: STOKER_READ_AHEAD_BYTES
  value: {{ .Values.objectStorage.readAheadBytes | int64 | quote }}
{{- include "stoker.objectStorageEnv" . }}
{{- end }}

{{- define "stoker.datasetMounts" -}}
{{- if .Values.dataset.volume -}}
- name: dataset
  mountPath: {{ .Values.dataset.mountPath }}
  readOnly: true
{{- end }}
{{- end }}

{{- define "stoker.datasetVolumes" -}}
{{- if .Values.dataset.volume -}}
- name: dataset
  {{- toYaml .Values.dataset.volume | nindent 2 }}
{{- end }}
{{- end }}

{{/* --team-weights, --team-priorities, --team-max-workers, --team-min-workers from a map of the coordinator's values: team=value
pairs, comma-separated, in key order. */}}
{{- define "stoker.teamValues" -}}
{{- $pairs := list -}}
{{- range $team, $weight := . -}}
{{- $pairs = append $pairs (printf "%s=%v" $team $weight) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}
