// The Helm chart's proof: real helm lints and renders helm/stoker with each values case, every rendered manifest
// is validated against the Kubernetes API schema of its kind and apiVersion (kube_schema.mjs), and each case checks
// what must and must not render. Bad values must be refused by the schema, and both autoscalers at once by the
// chart. Every STOKER_* variable the manifests set must be a flag the binary reads (checked against --help). Every
// `helm install` README.md shows is run as written (plus --dry-run=client), so the README cannot drift from the
// chart: it must install, and without keys of its own the release makes them in its key hook (keys_hook_test.mjs
// runs that hook's script against a fake API server). Per-team client keys (security.teams, security.keys.teams) get a
// Secret each, which no pod of the chart mounts, and the notes name them.
//
//   node tests/deploy/chart_test.mjs --helm .tools/helm/helm --bin build/bin
import { isDeepStrictEqual } from 'node:util';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { parseManifests, validateDocument } from './kube_schema.mjs';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const chart = path.join(repo, 'helm/stoker');
const arg = (name, fallback) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? path.resolve(process.argv[i + 1]) : fallback;
};
const helm = arg('--helm', path.join(repo, '.tools/helm/helm'));
const binDir = arg('--bin', path.join(repo, 'build/bin'));
const MONITORING = ['--api-versions', 'monitoring.coreos.com/v1'];
const KEDA = ['--api-versions', 'keda.sh/v1alpha1'];

// CURVE keys, made by the binary as an operator makes them, handed to helm with --set-file.
const keyDir = mkdtempSync(path.join(os.tmpdir(), 'stoker-chart-keys-'));
process.on('exit', () => rmSync(keyDir, { recursive: true, force: true }));
execFileSync(path.join(binDir, 'stoker'), ['keygen', '--keyring', keyDir], { encoding: 'utf8' });
const KEYS = ['coordinator', 'worker', 'client'].flatMap((role) =>
  ['--set-file', `security.keys.${role}=${keyDir}/${role}.key`]).concat(['--set-file', `security.trust=${keyDir}/trust`]);
writeFileSync(path.join(keyDir, 'bad-trust'), 'worker w AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n');
writeFileSync(path.join(keyDir, 'bad.key'), 'role = worker\nname = w\n');
// A keyring of teams (stoker keygen --keyring --teams), given as an operator gives it: a client key per team.
const teamDir = mkdtempSync(path.join(os.tmpdir(), 'stoker-chart-team-keys-'));
process.on('exit', () => rmSync(teamDir, { recursive: true, force: true }));
execFileSync(path.join(binDir, 'stoker'), ['keygen', '--keyring', teamDir, '--teams', 'team-a,team-b']);
execFileSync(path.join(binDir, 'stoker'), ['keygen', '--role', 'client', '--name', 'team-c', '--out', teamDir],
  { stdio: 'ignore' });  // a team key the trust file does not list
const TEAM_KEYS = ['coordinator', 'worker'].flatMap((role) => ['--set-file', `security.keys.${role}=${teamDir}/${role}.key`])
  .concat(['--set-file', `security.trust=${teamDir}/trust`]);
const teamKey = (team, file = `client-${team}.key`) => ['--set-file', `security.keys.teams.${team}=${teamDir}/${file}`];
const ROLE_OF = { coordinator: 'coordinator', worker: 'worker', 'example-job': 'client' };
// The objects the key hook (templates/keys-job.yaml) writes, from its command line: {secrets: {role: name},
// teams: {team: name}, trust}.
function hookWrites(docs) {
  const job = docs.find((d) => d.kind === 'Job' && d.metadata.labels['app.kubernetes.io/component'] === 'keys');
  if (!job) return undefined;
  const args = podSpec(job).containers[0].command;
  const value = (flag) => args.filter((a) => a.startsWith(`--${flag}=`)).map((a) => a.slice(flag.length + 3));
  const pairs = (flag) => Object.fromEntries(value(flag).map((s) => s.split('=')));
  return { job, secrets: pairs('secret'), teams: pairs('team'), trust: value('trust')[0] };
}

let failures = 0;
let checks = 0;
function check(cond, what) {
  checks++;
  if (!cond) { failures++; console.log(`  FAIL ${what}`); }
}

function helmRun(args) {
  return spawnSync(helm, args, { cwd: repo, encoding: 'utf8' });
}
function render(valuesFiles, extra = [], keys = KEYS) {
  const files = valuesFiles.flatMap((f) => ['-f', path.join(chart, f)]);
  const r = helmRun(['template', 'rel', chart, '--namespace', 'stoker', '--kube-version', '1.29.0', ...files, ...keys,
    ...extra]);
  if (r.status !== 0) throw new Error(`helm template ${valuesFiles} failed:\n${r.stderr}`);
  return parseManifests(r.stdout);
}
const ofKind = (docs, kind) => docs.filter((d) => d.kind === kind);
const one = (docs, kind, component) => docs.find((d) => d.kind === kind &&
  (!component || d.metadata.labels?.['app.kubernetes.io/component'] === component));
const podSpec = (d) => d.spec.template.spec;
const envOf = (container) => Object.fromEntries((container.env || []).map((e) => [e.name, e.value ?? e.valueFrom]));
const subset = (small, big) => Object.entries(small || {}).every(([k, v]) => big?.[k] === v);

// The flags each binary reads from the environment, from its own --help ("[STOKER_X]").
function envFlags(binary, ...args) {
  const out = execFileSync(path.join(binDir, binary), [...args, '--help'], { encoding: 'utf8' });
  return new Set([...out.matchAll(/\[(STOKER_[A-Z0-9_]+)\]/g)].map((m) => m[1]));
}
const flags = {
  coordinator: envFlags('stoker-coordinator'),
  worker: envFlags('stoker-worker'),
  trainer: envFlags('stoker', 'consume'),
  index: envFlags('stoker', 'index'),
};

// Checks every rendered case shares: schema validity, selectors, security, probes, env.
async function common(docs, name) {
  for (const d of docs) {
    const errors = await validateDocument(d);
    check(errors.length === 0, `${name}: ${d.kind}/${d.metadata?.name} invalid: ${errors.join('; ')}`);
    for (const key of ['app.kubernetes.io/name', 'app.kubernetes.io/instance', 'app.kubernetes.io/managed-by']) {
      check(d.metadata.labels?.[key], `${name}: ${d.kind}/${d.metadata.name} lacks label ${key}`);
    }
  }
  const selectors = [];
  for (const d of docs) {
    const sel = d.spec?.selector?.matchLabels ?? (d.kind === 'Service' ? d.spec.selector : undefined) ??
      (d.kind === 'NetworkPolicy' ? d.spec.podSelector.matchLabels : undefined);
    if (!sel || ['ServiceMonitor', 'PodMonitor'].includes(d.kind)) continue;
    selectors.push([d, sel]);
    check(!('app.kubernetes.io/version' in sel) && !('helm.sh/chart' in sel),
      `${name}: ${d.kind}/${d.metadata.name} selector carries a version label`);
    check(sel['app.kubernetes.io/component'], `${name}: ${d.kind}/${d.metadata.name} selector has no component`);
  }
  const workloads = docs.filter((d) => ['Deployment', 'StatefulSet'].includes(d.kind));
  for (const [d, sel] of selectors) {
    check(workloads.some((w) => subset(sel, w.spec.template.metadata.labels)),
      `${name}: ${d.kind}/${d.metadata.name} selects no pod the chart creates`);
    const matching = workloads.filter((w) => subset(sel, w.spec.template.metadata.labels));
    check(matching.length <= 1, `${name}: ${d.kind}/${d.metadata.name} selects pods of several workloads`);
  }
  for (const w of docs.filter((d) => ['Deployment', 'StatefulSet', 'Job'].includes(d.kind))) {
    const spec = podSpec(w);
    const who = `${name}: ${w.kind}/${w.metadata.name}`;
    check(spec.securityContext?.runAsNonRoot === true && Number.isInteger(spec.securityContext?.runAsUser) &&
      spec.securityContext.runAsUser > 0, `${who} does not run as a numeric non-root user`);
    check(spec.securityContext?.seccompProfile?.type === 'RuntimeDefault', `${who} has no RuntimeDefault seccomp`);
    check(spec.automountServiceAccountToken === false, `${who} mounts a service account token`);
    // Init containers too: the example Job's node-local worker is a native sidecar running stoker-worker.
    for (const c of [...spec.containers, ...(spec.initContainers || [])]) {
      const sc = c.securityContext || {};
      check(sc.allowPrivilegeEscalation === false && sc.readOnlyRootFilesystem === true &&
        JSON.stringify(sc.capabilities?.drop) === '["ALL"]', `${who}/${c.name} security context is not restricted`);
      const label = w.metadata.labels['app.kubernetes.io/component'];
      const component = c.name === 'local-worker' ? 'worker' :
        w.kind === 'Job' ? (label === 'index' ? 'index' : 'trainer') : label;
      for (const e of c.env || []) {
        if (e.name.startsWith('STOKER_')) {
          check(flags[component].has(e.name), `${who}/${c.name} sets ${e.name}, which the binary does not read`);
        }
      }
      // The admin port on the pod's IP and loopback only: POD_IP (status.podIP) defined before the kubelet expands it.
      const names = (c.env || []).map((e) => e.name);
      const listen = envOf(c).STOKER_METRICS_LISTEN;
      if (listen) {
        const port = listen.split(':').pop();
        check(listen === `$(POD_IP):${port},127.0.0.1:${port}` && /^[0-9]+$/.test(port),
          `${who}/${c.name} serves its admin port on ${listen}, not the pod's IP and 127.0.0.1`);
        check(envOf(c).POD_IP?.fieldRef?.fieldPath === 'status.podIP' &&
          names.indexOf('POD_IP') < names.indexOf('STOKER_METRICS_LISTEN'),
        `${who}/${c.name}: POD_IP is not the pod's IP defined before STOKER_METRICS_LISTEN`);
      }
      if (w.kind !== 'Job') {
        check(c.readinessProbe?.httpGet?.path === '/readyz' && c.livenessProbe?.httpGet?.path === '/healthz',
          `${who}/${c.name} probes are not /readyz and /healthz`);
      }
    }
  }
  checkSecurity(docs, name);
  const coordinator = one(docs, 'StatefulSet', 'coordinator');
  check(coordinator?.spec.replicas === 1, `${name}: coordinator is not a one-replica StatefulSet`);
  check(coordinator?.spec.volumeClaimTemplates?.[0]?.metadata.name === 'journal' &&
    envOf(podSpec(coordinator).containers[0]).STOKER_JOURNAL === '/var/lib/stoker/journal',
  `${name}: coordinator journal is not on its PVC`);
  const worker = one(docs, 'Deployment', 'worker');
  const wenv = envOf(podSpec(worker).containers[0]);
  const grace = parseInt(wenv.STOKER_DRAIN_GRACE, 10);
  check(podSpec(worker).terminationGracePeriodSeconds > grace,
    `${name}: worker termination grace ${podSpec(worker).terminationGracePeriodSeconds}s is not longer than its drain ${grace}s`);
  check(wenv.STOKER_COORDINATOR === `tcp://${coordinator?.metadata.name}.${coordinator?.metadata.namespace}.svc:7400`,
    `${name}: workers dial ${wenv.STOKER_COORDINATOR}`);
  check(wenv.STOKER_ADVERTISE_HOST?.fieldRef?.fieldPath === 'status.podIP', `${name}: workers do not advertise the pod IP`);
  check(worker.spec.template.spec.topologySpreadConstraints?.length === 1, `${name}: workers are not spread`);
  const wres = podSpec(worker).containers[0].resources;
  check(wres?.requests?.cpu && wres?.limits?.cpu && wres?.requests?.memory && wres?.limits?.memory,
    `${name}: workers lack CPU or memory requests and limits`);
  check(one(docs, 'PodDisruptionBudget', 'worker')?.spec.maxUnavailable === 1, `${name}: no worker PDB`);
  check(!one(docs, 'PodDisruptionBudget', 'coordinator'), `${name}: a coordinator PDB would block node drains`);
  return { coordinator, worker };
}

// CURVE: with it on, each pod mounts its own role's key (and no other role's) and the trust file, and names them in
// STOKER_KEY_FILE and STOKER_TRUST_FILE; with it off, STOKER_INSECURE and no keys. Secrets hold only what was given.
function checkSecurity(docs, name) {
  const secrets = ofKind(docs, 'Secret');
  for (const w of docs.filter((d) => ['Deployment', 'StatefulSet', 'Job'].includes(d.kind))) {
    const spec = podSpec(w);
    const env = envOf(spec.containers[0]);
    const role = ROLE_OF[w.metadata.labels['app.kubernetes.io/component']];
    const who = `${name}: ${w.kind}/${w.metadata.name}`;
    const keyVolume = (spec.volumes || []).find((v) => v.name === 'stoker-key');
    if (['index', 'keys'].includes(w.metadata.labels['app.kubernetes.io/component'])) {
      // The index Job talks only to object storage, the key hook only to the API server: no CURVE key mounted.
      check(!keyVolume && !env.STOKER_KEY_FILE && !env.STOKER_TRUST_FILE, `${who}: mounts a CURVE key`);
      continue;
    }
    if (env.STOKER_INSECURE !== undefined) {
      check(env.STOKER_INSECURE === 'true' && !keyVolume && !env.STOKER_KEY_FILE, `${who}: insecure but with a key`);
      continue;
    }
    check(env.STOKER_KEY_FILE === '/etc/stoker/key/key' && env.STOKER_TRUST_FILE === '/etc/stoker/trust/trust',
      `${who}: no key and trust file named`);
    const mounts = spec.containers[0].volumeMounts || [];
    check(mounts.some((m) => m.name === 'stoker-key' && m.mountPath === '/etc/stoker/key' && m.readOnly) &&
      mounts.some((m) => m.name === 'stoker-trust' && m.mountPath === '/etc/stoker/trust' && m.readOnly),
    `${who}: key or trust not mounted read-only`);
    const secretName = keyVolume?.secret?.secretName;
    const secret = secrets.find((s) => s.metadata.name === secretName);
    if (secret) {
      const text = Buffer.from(secret.data.key, 'base64').toString();
      check(text.includes(`role = ${role}\n`), `${who}: mounts a Secret holding another role's key`);
    }
    check(w.spec.template.metadata.annotations?.['stoker.io/security-checksum'], `${who}: no checksum to roll keys`);
    const trustName = spec.volumes.find((v) => v.name === 'stoker-trust')?.configMap?.name;
    const trust = docs.find((d) => d.kind === 'ConfigMap' && d.metadata.name === trustName);
    const hook = hookWrites(docs);
    if (hook) {
      // Keys made at install: the pod mounts exactly what the hook writes, and the chart renders neither.
      check(!secret && !trust, `${who}: the chart renders key material the key hook also makes`);
      check(hook.secrets[role] === secretName && hook.trust === trustName,
        `${who}: mounts ${secretName} and ${trustName}, but the key hook writes ${hook.secrets[role]} and ${hook.trust}`);
      continue;
    }
    check(/^coordinator \S+ \S{40}$/m.test(trust?.data?.trust ?? ''), `${who}: the trust file lists no coordinator`);
  }
}

// The key hook: a pre-install Job in the trainer image with its own ServiceAccount, whose Role reads only the four
// objects by name and creates Secrets and ConfigMaps, and nothing else; the token projected into that pod alone.
function checkKeyHook(docs, name) {
  const hook = hookWrites(docs);
  check(hook, `${name}: no key hook Job`);
  if (!hook) return;
  const { job } = hook;
  // At upgrades too: a team the upgrade adds gets its key and its trust line.
  check(job.metadata.annotations['helm.sh/hook'] === 'pre-install,pre-upgrade',
    `${name}: the key hook is not a pre-install and pre-upgrade hook`);
  const spec = podSpec(job);
  const c = spec.containers[0];
  check(c.command[0] === 'python3' && c.command[1] === '-c' &&
    c.command[2] === readFileSync(path.join(chart, 'files/make-keys.py'), 'utf8'),
  `${name}: the key hook does not run files/make-keys.py`);
  check(/stoker-trainer:[^:]+-cpu$/.test(c.image), `${name}: the key hook runs ${c.image}, not the CPU trainer image`);
  check(JSON.stringify(Object.keys(hook.secrets).sort()) === '["client","coordinator","worker"]' && hook.trust,
    `${name}: the key hook does not write a Secret per role and the trust ConfigMap`);
  const account = spec.serviceAccountName;
  const hooks = docs.filter((d) => d.metadata.annotations?.['helm.sh/hook']);
  const sa = hooks.find((d) => d.kind === 'ServiceAccount' && d.metadata.name === account);
  const binding = hooks.find((d) => d.kind === 'RoleBinding' && d.subjects?.some((s) => s.name === account));
  const role = hooks.find((d) => d.kind === 'Role' && d.metadata.name === binding?.roleRef.name);
  check(sa && sa.automountServiceAccountToken === false && binding && role,
    `${name}: the key hook's ServiceAccount, Role and RoleBinding are not hooks of their own`);
  for (const d of [sa, role, binding]) {
    check(d?.metadata.annotations['helm.sh/hook'] === job.metadata.annotations['helm.sh/hook'],
      `${name}: ${d?.kind} is not there at every run of the key hook Job`);
    check(Number(d?.metadata.annotations['helm.sh/hook-weight']) < Number(job.metadata.annotations['helm.sh/hook-weight']),
      `${name}: ${d?.kind} is not created before the key hook Job`);
  }
  const rules = (role?.rules || []).map((r) => JSON.stringify([r.apiGroups, r.resources, r.verbs, r.resourceNames ?? []]));
  const expected = [
    [[''], ['secrets'], ['get'], [...Object.values(hook.secrets), ...Object.values(hook.teams)]],
    [[''], ['configmaps'], ['get', 'update'], [hook.trust]],
    [[''], ['secrets', 'configmaps'], ['create'], []],
  ].map((r) => JSON.stringify(r));
  check(isDeepStrictEqual(rules.sort(), expected.sort()), `${name}: the key hook's Role is not limited: ${rules}`);
  const token = spec.volumes.find((v) => v.projected)?.projected.sources.find((s) => s.serviceAccountToken);
  check(token?.serviceAccountToken.expirationSeconds <= 3600 &&
    c.volumeMounts.some((m) => m.mountPath === '/var/run/secrets/kubernetes.io/serviceaccount' && m.readOnly),
  `${name}: the key hook's token is not projected read-only`);
  check(spec.volumes.find((v) => v.name === 'tmp')?.emptyDir?.medium === 'Memory',
    `${name}: the key hook writes keys to disk (its /tmp is not in memory)`);
}

// The example Job's node-local worker (exampleJob.localWorkers): a native sidecar (an init container with
// restartPolicy Always) running the pool's worker image as a node-local worker for the directory it shares with the
// trainer (one in-memory emptyDir, mounted at one path in both, named to both by STOKER_LOCAL_DIR); the trainer's
// client key and trust file exactly as the trainer mounts them (never the workers' key); the dataset volume,
// mount and object-storage settings exactly as the worker Deployment has them; the trainer's user; a CPU request of
// one core per thread. Returns the sidecar and the trainer.
function checkLocalWorkers(docs, name, worker) {
  const job = one(docs, 'Job', 'example-job');
  const spec = job && podSpec(job);
  const trainer = spec?.containers.find((c) => c.name === 'trainer');
  const side = (spec?.initContainers || []).find((c) => c.name === 'local-worker');
  check(side && spec.initContainers.length === 1, `${name}: the example Job has no local-worker init container`);
  if (!side || !trainer) return {};
  check(side.restartPolicy === 'Always', `${name}: the local worker is not a native sidecar (restartPolicy Always)`);
  const pool = podSpec(worker).containers[0];
  check(side.image === pool.image && side.imagePullPolicy === pool.imagePullPolicy && !side.command,
    `${name}: the local worker does not run the worker image's stoker-worker (${side.image}, ${side.command})`);
  const [senv, tenv, wenv] = [envOf(side), envOf(trainer), envOf(pool)];
  const dir = senv.STOKER_LOCAL_DIR;
  check(/^\/./.test(dir ?? '') && tenv.STOKER_LOCAL_DIR === dir,
    `${name}: the local worker's STOKER_LOCAL_DIR ${dir} is not the trainer's ${tenv.STOKER_LOCAL_DIR}`);
  const mountAt = (c) => (c.volumeMounts || []).filter((m) => m.mountPath === dir);
  const [sm, tm] = [mountAt(side), mountAt(trainer)];
  check(sm.length === 1 && tm.length === 1 && sm[0].name === tm[0].name && !sm[0].readOnly && !tm[0].readOnly &&
    !sm[0].subPath && !tm[0].subPath, `${name}: the local dir is not one writable volume both containers mount there`);
  const shared = spec.volumes.find((v) => v.name === sm[0]?.name);
  check(shared?.emptyDir?.medium === 'Memory', `${name}: the local dir is not an in-memory emptyDir`);
  check(senv.STOKER_COORDINATOR === wenv.STOKER_COORDINATOR && tenv.STOKER_COORDINATOR === wenv.STOKER_COORDINATOR,
    `${name}: the local worker dials ${senv.STOKER_COORDINATOR}`);
  check(senv.STOKER_WORKER_ID?.fieldRef?.fieldPath === 'metadata.name', `${name}: the local worker is not named by its pod`);
  for (const k of ['STOKER_LISTEN', 'STOKER_ADVERTISE', 'STOKER_ADVERTISE_HOST']) {
    check(senv[k] === undefined, `${name}: the local worker sets ${k} (it binds and advertises its ipc:// socket)`);
  }
  const security = (c, env) => [env.STOKER_KEY_FILE, env.STOKER_TRUST_FILE, env.STOKER_INSECURE,
    (c.volumeMounts || []).filter((m) => ['stoker-key', 'stoker-trust'].includes(m.name))];
  check(isDeepStrictEqual(security(side, senv), security(trainer, tenv)),
    `${name}: the local worker's key and trust differ from the trainer's`);
  const keyVolume = (s) => s.volumes.find((v) => v.name === 'stoker-key')?.secret?.secretName;
  check(!keyVolume(spec) || keyVolume(spec) !== keyVolume(podSpec(worker)), `${name}: the example Job mounts the workers' key`);
  const keySecret = ofKind(docs, 'Secret').find((s) => s.metadata.name === keyVolume(spec));
  check(!keySecret || Buffer.from(keySecret.data.key, 'base64').toString().includes('role = client\n'),
    `${name}: the local worker's key is not a client key`);
  const datasetMounts = (c) => (c.volumeMounts || []).filter((m) => m.name === 'dataset');
  check(isDeepStrictEqual(datasetMounts(side), datasetMounts(pool)) &&
    isDeepStrictEqual(spec.volumes.find((v) => v.name === 'dataset'), podSpec(worker).volumes.find((v) => v.name === 'dataset')),
  `${name}: the local worker does not mount the dataset as the pool's workers do`);
  check(datasetMounts(trainer).length === 0, `${name}: the trainer mounts the dataset`);
  const dataEnv = (env) => Object.fromEntries(Object.entries(env)
    .filter(([k]) => /^(AWS_|STOKER_S3_|STOKER_STORAGE_|STOKER_READ_AHEAD_BYTES$|STOKER_MANIFEST_ROOT$)/.test(k)));
  check(isDeepStrictEqual(dataEnv(senv), dataEnv(wenv)), `${name}: the local worker reads storage unlike the pool: ${
    JSON.stringify(dataEnv(senv))} vs ${JSON.stringify(dataEnv(wenv))}`);
  const uid = (c) => c.securityContext?.runAsUser ?? spec.securityContext?.runAsUser;
  check(Number.isInteger(uid(side)) && uid(side) === uid(trainer) &&
    isDeepStrictEqual(side.securityContext, trainer.securityContext), `${name}: the local worker and trainer differ in user`);
  check(Number(side.resources?.requests?.cpu) === Number(senv.STOKER_THREADS) && side.resources?.limits?.memory,
    `${name}: the local worker's CPU request is not its ${senv.STOKER_THREADS} threads, or it has no memory limit`);
  const ports = [...(trainer.ports || []), ...(side.ports || [])].map((p) => p.containerPort);
  check(new Set(ports).size === ports.length, `${name}: the trainer and the local worker share a port: ${ports}`);
  return { side, trainer };
}

// The Secrets the chart's pods mount: never a team's key (that team's trainers mount it).
const mountedSecrets = (docs) => docs.filter((d) => d.spec?.template?.spec)
  .flatMap((w) => (podSpec(w).volumes || []).map((v) => v.secret?.secretName).filter(Boolean));

const MONITORING_KINDS = ['ServiceMonitor', 'PodMonitor', 'PrometheusRule'];
const cases = [
  ['defaults', ['ci/default-values.yaml'], [], (docs, { worker, coordinator }) => {
    check(docs.length === 13, `defaults: ${docs.length} documents, expected 13 (9 + 3 key Secrets + the trust)`);
    check(worker.spec.replicas === 2, 'defaults: worker replicas is not 2');
    check(envOf(podSpec(worker).containers[0]).STOKER_PLAIN_DATA === undefined, 'defaults: data plane not sealed');
    check(envOf(podSpec(coordinator).containers[0]).STOKER_MAX_WORKERS === '2', 'defaults: max workers is not 2');
    check(envOf(podSpec(coordinator).containers[0]).STOKER_TEAM_WEIGHTS === undefined, 'defaults: team weights set');
    for (const k of [...MONITORING_KINDS, 'HorizontalPodAutoscaler', 'ScaledObject', 'Job']) {
      check(ofKind(docs, k).length === 0, `defaults: rendered a ${k}`);
    }
    check(ofKind(docs, 'Secret').length === 3 && ofKind(docs, 'ConfigMap').length === 1,
      'defaults: not a Secret per role and the trust ConfigMap');
    const np = one(docs, 'NetworkPolicy', 'coordinator');
    const peers = np?.spec.ingress.flatMap((r) => r.from);
    check(peers?.some((p) => p.namespaceSelector?.matchExpressions?.[0]?.values?.includes('stoker') && p.podSelector),
      'defaults: clients of the release namespace cannot reach the coordinator');
    check(np?.spec.ingress.every((r) => r.from?.length > 0), 'defaults: a NetworkPolicy rule admits every source');
  }],
  ['insecure', ['ci/default-values.yaml'], ['--set', 'security.curve=false'],
    (docs, { worker }) => {
      check(ofKind(docs, 'Secret').length === 0 && ofKind(docs, 'ConfigMap').length === 0,
        'insecure: rendered keys or a trust file');
      check(envOf(podSpec(worker).containers[0]).STOKER_INSECURE === 'true', 'insecure: workers are not --insecure');
    }, []],
  ['teams', ['ci/default-values.yaml'], ['--set', 'coordinator.teamWeights.team-b=0.5', '--set',
    'coordinator.teamWeights.team-a=3', '--set', 'coordinator.teamPriorities.prod=1', '--set',
    'coordinator.teamMaxWorkers.research=4', '--set', 'coordinator.teamMinWorkers.research=1'], (docs, { coordinator }) => {
    const env = envOf(podSpec(coordinator).containers[0]);
    check(env.STOKER_TEAM_WEIGHTS === 'team-a=3,team-b=0.5',
      `teams: --team-weights is ${env.STOKER_TEAM_WEIGHTS}, not team-a=3,team-b=0.5`);
    check(env.STOKER_TEAM_PRIORITIES === 'prod=1', `teams: --team-priorities is ${env.STOKER_TEAM_PRIORITIES}`);
    check(env.STOKER_TEAM_MAX_WORKERS === 'research=4', `teams: --team-max-workers is ${env.STOKER_TEAM_MAX_WORKERS}`);
    check(env.STOKER_TEAM_MIN_WORKERS === 'research=1', `teams: --team-min-workers is ${env.STOKER_TEAM_MIN_WORKERS}`);
  }],
  ['generated keys', ['ci/default-values.yaml'], [], (docs) => {
    checkKeyHook(docs, 'generated keys');
    check(ofKind(docs, 'Secret').length === 0 && ofKind(docs, 'ConfigMap').length === 0,
      'generated keys: the chart renders key material the hook makes');
  }, []],
  ['generated keys for the example Job', ['ci/monitoring-values.yaml'], MONITORING, (docs) => {
    checkKeyHook(docs, 'generated keys for the example Job');
    const job = one(docs, 'Job', 'example-job');
    check(podSpec(job).volumes.find((v) => v.name === 'stoker-key')?.secret.secretName === hookWrites(docs)?.secrets.client,
      'generated keys: the example Job does not mount the client key the hook makes');
  }, []],
  ['generated keys per team', ['ci/default-values.yaml'], ['--set', 'security.teams={team-a,team-b}'], (docs) => {
    checkKeyHook(docs, 'generated keys per team');
    const teams = hookWrites(docs)?.teams;
    check(isDeepStrictEqual(teams, { 'team-a': 'rel-stoker-client-team-a-key', 'team-b': 'rel-stoker-client-team-b-key' }),
      `generated keys per team: the key hook writes ${JSON.stringify(teams)}`);
    check(ofKind(docs, 'Secret').length === 0, 'generated keys per team: the chart renders key material the hook makes');
    check(!mountedSecrets(docs).some((n) => Object.values(teams ?? {}).includes(n)),
      'generated keys per team: a pod of the chart mounts a team\'s key');
    // A team added by an upgrade rolls the coordinator, which reads the trust file the hook extends, and only it.
    const sum = (d, kind, component) => one(d, kind, component)?.spec.template.metadata.annotations['stoker.io/security-checksum'];
    const more = render(['ci/default-values.yaml'], ['--set', 'security.teams={team-a,team-b,team-c}'], []);
    check(sum(docs, 'StatefulSet', 'coordinator') !== sum(more, 'StatefulSet', 'coordinator') &&
      sum(docs, 'Deployment', 'worker') === sum(more, 'Deployment', 'worker'),
    'generated keys per team: adding a team does not roll the coordinator alone');
  }, []],
  ['team keys given', ['ci/default-values.yaml'], [...teamKey('team-a'), ...teamKey('team-b'), '--set',
    'security.teams={team-a}'], (docs) => {
    for (const team of ['team-a', 'team-b']) {
      const secret = ofKind(docs, 'Secret').find((s) => s.metadata.name === `rel-stoker-client-${team}-key`);
      check(secret?.metadata.labels['stoker.io/team'] === team && Buffer.from(secret.data.key, 'base64').toString() ===
        readFileSync(path.join(teamDir, `client-${team}.key`), 'utf8'), `team keys given: no Secret holds ${team}'s key`);
    }
    check(ofKind(docs, 'Secret').length === 4, 'team keys given: not a Secret for each role and each team');
    check(!mountedSecrets(docs).some((n) => n.includes('-client-team-')), 'team keys given: a pod mounts a team\'s key');
  }, TEAM_KEYS],
  ['existing secrets', ['ci/default-values.yaml'], ['--set', 'security.existingSecrets.coordinator=coord-key',
    '--set', 'security.existingSecrets.worker=worker-key', '--set-file', `security.trust=${keyDir}/trust`],
  (docs, { worker, coordinator }) => {
    check(ofKind(docs, 'Secret').length === 0, 'existing secrets: the chart made a Secret anyway');
    check(podSpec(coordinator).volumes.find((v) => v.name === 'stoker-key')?.secret.secretName === 'coord-key' &&
      podSpec(worker).volumes.find((v) => v.name === 'stoker-key')?.secret.secretName === 'worker-key',
    'existing secrets: the pods do not mount the named Secrets');
  }, []],
  ['monitoring without the CRDs', ['ci/monitoring-values.yaml'], [], (docs) => {
    for (const k of MONITORING_KINDS) check(ofKind(docs, k).length === 0, `no CRDs: rendered a ${k}`);
    check(ofKind(docs, 'ConfigMap').filter((c) => c.metadata.labels.grafana_dashboard).length === 2,
      'no CRDs: dashboards are ConfigMaps and still render');
  }],
  ['monitoring', ['ci/monitoring-values.yaml'], MONITORING, (docs) => {
    const services = ofKind(docs, 'Service');
    for (const component of ['coordinator', 'worker']) {
      const sm = one(docs, 'ServiceMonitor', component);
      check(sm?.metadata.labels.release === 'kube-prometheus-stack', `monitoring: ${component} monitor lacks release label`);
      const job = sm?.spec.endpoints[0].relabelings?.find((r) => r.targetLabel === 'job')?.replacement;
      check(job === `stoker-${component}`, `monitoring: ${component} scrape job is ${job}`);
      const targets = services.filter((s) => subset(sm?.spec.selector.matchLabels, s.metadata.labels));
      check(targets.length === 1 && targets[0].spec.ports.some((p) => p.name === sm.spec.endpoints[0].port),
        `monitoring: ${component} ServiceMonitor selects ${targets.length} Services with a metrics port`);
    }
    const pm = one(docs, 'PodMonitor');
    const job = one(docs, 'Job');
    check(pm?.spec.namespaceSelector.any === true, 'monitoring: the client PodMonitor does not look in every namespace');
    check(pm?.spec.podMetricsEndpoints[0].relabelings.some((r) => r.replacement === 'stoker-client'),
      'monitoring: the client scrape job is not stoker-client');
    check(subset(pm?.spec.selector.matchLabels, job?.spec.template.metadata.labels),
      'monitoring: the PodMonitor does not select the example Job');
    const trainer = job && podSpec(job).containers[0];
    check(trainer?.ports.some((p) => p.name === pm?.spec.podMetricsEndpoints[0].port),
      'monitoring: the example Job has no port named as the PodMonitor scrapes');
    check(trainer?.resources.limits['nvidia.com/gpu'] === 1, 'monitoring: the example Job requests no GPU');
    check(job?.spec.completionMode === 'Indexed' && job.spec.completions === 2, 'monitoring: not one pod per rank');
    check(!podSpec(job).initContainers && envOf(trainer).STOKER_LOCAL_DIR === undefined &&
      !podSpec(job).volumes.some((v) => v.name === 'dataset'), 'monitoring: local workers without localWorkers.enabled');
    const rule = one(docs, 'PrometheusRule');
    const rules = YAML.parse(readFileSync(path.join(chart, 'files/rules.yaml'), 'utf8'));
    check(isDeepStrictEqual(rule?.spec, rules), 'monitoring: the PrometheusRule differs from files/rules.yaml');
    const dashboards = ofKind(docs, 'ConfigMap').filter((c) => c.metadata.labels.grafana_dashboard);
    check(dashboards.length === 2, `monitoring: ${dashboards.length} dashboard ConfigMaps`);
    for (const cm of dashboards) {
      check(cm.metadata.labels.grafana_dashboard === '1' && cm.metadata.namespace === 'monitoring',
        `monitoring: ${cm.metadata.name} is not labelled for the Grafana sidecar in its namespace`);
      const [file, text] = Object.entries(cm.data)[0];
      check(text === readFileSync(path.join(chart, 'files/dashboards', file), 'utf8').replace(/\n$/, ''),
        `monitoring: ${file} differs from the file`);
      check(JSON.parse(text).templating.list.some((v) => v.type === 'datasource'), `monitoring: ${file} has no datasource variable`);
    }
  }],
  ['object storage', ['ci/default-values.yaml'], ['--set', 'dataset.volume.persistentVolumeClaim.readOnly=false',
    '--set', 'exampleJob.enabled=true', '--set',
    'exampleJob.index.url=s3://datasets/imagenet/train/', '--set', 'objectStorage.endpoint=https://minio.storage:9000',
    '--set', 'objectStorage.region=eu-west-1', '--set', 'objectStorage.credentials.accessKeyId=AKIDCHART',
    '--set', 'objectStorage.credentials.secretAccessKey=chart-secret-value'], (docs, { worker }) => {
    const secret = one(docs, 'Secret', 'object-storage');
    check(secret && Buffer.from(secret.data.AWS_SECRET_ACCESS_KEY, 'base64').toString() === 'chart-secret-value',
      'object storage: no Secret with the credentials');
    const index = one(docs, 'Job', 'index');
    check(index?.metadata.annotations['helm.sh/hook'] === 'pre-install,pre-upgrade',
      'object storage: the index Job does not run before the release');
    const ic = index && podSpec(index).containers[0];
    check(JSON.stringify(ic?.command) === '["stoker","index","s3://datasets/imagenet/train/","-o","/data/train.stoker"]',
      `object storage: the index Job runs ${JSON.stringify(ic?.command)}`);
    check(podSpec(index).volumes.some((v) => v.name === 'dataset') &&
      ic.volumeMounts.some((m) => m.name === 'dataset' && !m.readOnly), 'object storage: the index Job cannot write the manifest');
    for (const [who, c] of [['worker', podSpec(worker).containers[0]], ['index Job', ic]]) {
      const env = envOf(c);
      check(env.STOKER_S3_ENDPOINT === 'https://minio.storage:9000' && env.STOKER_S3_REGION === 'eu-west-1',
        `object storage: the ${who} gets no endpoint or region`);
      for (const k of ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN']) {
        check(env[k]?.secretKeyRef?.name === secret?.metadata.name && env[k].secretKeyRef.key === k,
          `object storage: the ${who}'s ${k} does not come from the Secret`);
      }
    }
    check(!JSON.stringify(docs.filter((d) => d.kind !== 'Secret')).includes('chart-secret-value'),
      'object storage: the secret appears outside its Secret');
    check(envOf(podSpec(worker).containers[0]).STOKER_READ_AHEAD_BYTES === '268435456',
      'object storage: the read-ahead cap is not passed');
  }],
  ['object storage with an existing Secret', ['ci/default-values.yaml'], ['--set',
    'objectStorage.credentials.existingSecret=my-s3'], (docs, { worker }) => {
    check(!one(docs, 'Secret', 'object-storage'), 'existing Secret: the chart made one anyway');
    check(envOf(podSpec(worker).containers[0]).AWS_SECRET_ACCESS_KEY?.secretKeyRef?.name === 'my-s3',
      'existing Secret: the workers do not read it');
    check(!one(docs, 'Job', 'index'), 'existing Secret: an index Job without exampleJob.index.url');
  }],
  ['local workers', ['ci/local-workers-values.yaml'], [], (docs, { worker }) => {
    const { side } = checkLocalWorkers(docs, 'local workers', worker);
    const env = side ? envOf(side) : {};
    check(env.STOKER_THREADS === '4' && side?.resources.requests.cpu === '4', 'local workers: not 4 threads on 4 cores');
    check(env.STOKER_LOCAL_DIR === '/run/stoker-local', `local workers: the local dir is ${env.STOKER_LOCAL_DIR}`);
    check(env.STOKER_METRICS_LISTEN === '$(POD_IP):9403,127.0.0.1:9403' && side?.livenessProbe?.httpGet?.path === '/healthz' &&
      side.readinessProbe?.httpGet?.path === '/readyz' &&
      side.ports?.some((p) => p.name === side.livenessProbe.httpGet.port && p.containerPort === 9403),
    'local workers: the sidecar is not probed on its metrics port');
    check(env.STOKER_KEY_FILE === '/etc/stoker/key/key', 'local workers: the sidecar has no CURVE key');
  }],
  ['local workers with generated keys', ['ci/local-workers-values.yaml'], [], (docs, { worker }) => {
    checkLocalWorkers(docs, 'local workers with generated keys', worker);
    const job = one(docs, 'Job', 'example-job');
    check(podSpec(job).volumes.find((v) => v.name === 'stoker-key')?.secret.secretName === hookWrites(docs)?.secrets.client,
      'local workers with generated keys: the sidecar does not mount the client key the hook makes');
  }, []],
  ['local workers without CURVE', ['ci/local-workers-values.yaml'], ['--set', 'security.curve=false'], (docs, { worker }) => {
    const { side } = checkLocalWorkers(docs, 'local workers without CURVE', worker);
    check(side && envOf(side).STOKER_INSECURE === 'true' && !side.volumeMounts.some((m) => m.name === 'stoker-key'),
      'local workers without CURVE: the sidecar is not --insecure, or mounts a key');
  }, []],
  ['local workers on object storage', ['ci/local-workers-values.yaml'], ['--set',
    'objectStorage.endpoint=https://minio.storage:9000', '--set', 'objectStorage.credentials.existingSecret=my-s3',
    '--set', 'dataset.manifestRoot=/data', '--set', 'exampleJob.localWorkers.metricsPort=0'], (docs, { worker }) => {
    const { side } = checkLocalWorkers(docs, 'local workers on object storage', worker);
    const env = side ? envOf(side) : {};
    check(env.STOKER_S3_ENDPOINT === 'https://minio.storage:9000' && env.AWS_SECRET_ACCESS_KEY?.secretKeyRef?.name === 'my-s3' &&
      env.STOKER_MANIFEST_ROOT === '/data', 'local workers on object storage: the sidecar gets no endpoint or credentials');
    check(env.STOKER_METRICS_LISTEN === '' && !side?.ports && !side?.livenessProbe && !side?.readinessProbe,
      'local workers without metrics: the sidecar still serves or probes /metrics');
  }],
  ['hpa', ['ci/hpa-values.yaml'], [], (docs, { worker, coordinator }) => {
    const hpa = one(docs, 'HorizontalPodAutoscaler');
    check(hpa?.apiVersion === 'autoscaling/v2', 'hpa: not autoscaling/v2');
    check(hpa?.spec.scaleTargetRef.name === worker.metadata.name, 'hpa: does not target the worker Deployment');
    check(JSON.stringify(hpa?.spec.metrics.map((m) => m.type)) === '["Resource","External"]', 'hpa: not CPU + external');
    check(!('replicas' in worker.spec), 'hpa: the Deployment sets replicas, which would fight the HPA on upgrade');
    check(envOf(podSpec(coordinator).containers[0]).STOKER_MAX_WORKERS === '24', 'hpa: coordinator max workers is not 24');
    check(envOf(podSpec(worker).containers[0]).STOKER_THREADS === '8', 'hpa: threads not passed');
    check(ofKind(docs, 'ScaledObject').length === 0, 'hpa: rendered a ScaledObject');
  }],
  ['keda', ['ci/keda-values.yaml'], [...KEDA, ...MONITORING], (docs, { worker }) => {
    const so = one(docs, 'ScaledObject');
    check(so?.spec.scaleTargetRef.name === worker.metadata.name, 'keda: does not target the worker Deployment');
    check(JSON.stringify(so?.spec.triggers.map((t) => t.name)) === '["busy-ratio","recommended-workers","input-stall"]',
      'keda: triggers are not busy-ratio, recommended-workers, input-stall');
    check(so?.spec.triggers.every((t) => t.metadata.query.includes('job="stoker-')), 'keda: a query ignores the job label');
    check(so?.spec.triggers[2].metadata.query.includes('namespace="training"'), 'keda: stall query not in the client namespace');
    check(so?.spec.fallback?.replicas >= 1, 'keda: no fallback beside the recommended-workers trigger');
    check(ofKind(docs, 'HorizontalPodAutoscaler').length === 0, 'keda: rendered an HPA beside KEDA');
    check(!('replicas' in worker.spec), 'keda: the Deployment sets replicas');
    check(envOf(podSpec(worker).containers[0]).STOKER_THREADS?.resourceFieldRef?.resource === 'requests.cpu',
      'keda: threads do not follow the CPU request');
  }],
];

const refused = [
  ['the retired plainData', ['--set', 'security.plainData=true'], /security.plainData is retired: batches are always sealed/],
  ['both autoscalers', ['--set', 'worker.autoscaling.hpa.enabled=true', '--set', 'worker.autoscaling.keda.enabled=true', ...KEDA], /either hpa or keda, not both/],
  ['KEDA without its CRDs', ['--set', 'worker.autoscaling.keda.enabled=true'], /needs KEDA's CRDs/],
  ['a string for an integer', ['--set', 'worker.replicas=two'], /worker\/replicas.*want integer/],
  ['a misspelt key', ['--set', 'worker.iamge.tag=x'], /additional properties 'iamge' not allowed/],
  ['a bad duration', ['--set', 'coordinator.leaseTtl=fast'], /leaseTtl/],
  ['a team weight of zero', ['--set', 'coordinator.teamWeights.team-a=0'], /teamWeights/],
  ['a team weight above 1000', ['--set', 'coordinator.teamWeights.team-a=5000'], /teamWeights/],
  ['a team cap of half a worker', ['--set', 'coordinator.teamMaxWorkers.team-a=0.5'], /teamMaxWorkers/],
  ['a team guarantee of no worker', ['--set', 'coordinator.teamMinWorkers.team-a=0'], /teamMinWorkers/],
  ['a bad pull policy', ['--set', 'worker.image.pullPolicy=Sometimes'], /pullPolicy/],
  ['an access key without its secret', ['--set', 'objectStorage.credentials.accessKeyId=AK'],
    /accessKeyId needs secretAccessKey/],
  ['an endpoint with a path', ['--set', 'objectStorage.endpoint=https://minio/bucket'], /endpoint/],
  ['indexing onto a read-only dataset volume', ['-f', path.join(chart, 'ci/default-values.yaml'), '--set',
    'exampleJob.enabled=true', '--set', 'exampleJob.index.url=s3://b/p/'], /persistentVolumeClaim is readOnly/],
  ['KEDA scaling from zero', ['--set', 'worker.autoscaling.keda.minReplicas=0'], /minReplicas/],
  ['min above max', ['--set', 'worker.autoscaling.hpa.enabled=true', '--set', 'worker.autoscaling.hpa.minReplicas=40'], /minReplicas is greater than maxReplicas/],
  ['a cluster older than 1.29', ['--kube-version', '1.28.9'], /kubeVersion|incompatible/i],
  ['a bad busy target', ['--set', 'worker.autoscaling.keda.busyRatioTarget=80%'], /busyRatioTarget/],
  ['a CPU request above the limit', ['--set', 'worker.resources.requests.cpu=8'], /requests.cpu \(8\) is above limits.cpu \(4\)/],
  ['a millicore request above the limit', ['--set', 'worker.resources.requests.cpu=4500m'], /is above limits.cpu/],
  ['CURVE without keys when the chart may not make them', ['--set', 'security.generateKeys.enabled=false'],
    /the coordinator has no key: make one with `stoker keygen/, []],
  ['a trust file without keys (the chart makes keys only when none are given)',
    ['--set-file', `security.trust=${keyDir}/trust`], /the coordinator has no key/, []],
  ['a worker key as the coordinator\'s', ['--set-file', `security.keys.coordinator=${keyDir}/worker.key`],
    /security.keys.coordinator is not a coordinator key file/],
  ['a trust file without the coordinator', ['--set-file', `security.trust=${keyDir}/bad-trust`],
    /lists no coordinator key/],
  ['local workers without a fixed user', ['--set', 'exampleJob.enabled=true', '--set',
    'exampleJob.localWorkers.enabled=true', '--set', 'podSecurityContext.runAsUser=null'], /localWorkers needs a fixed user/],
  ['local workers on the trainer\'s metrics port', ['--set', 'exampleJob.enabled=true', '--set',
    'exampleJob.localWorkers.enabled=true', '--set', 'exampleJob.localWorkers.metricsPort=9402'], /the trainer's metrics port/],
  ['a local dir too long for a socket path', ['--set',
    'exampleJob.localWorkers.mountPath=/run/a-directory-name-too-long-for-socket-paths'], /localWorkers\/mountPath/],
  ['a relative local dir', ['--set', 'exampleJob.localWorkers.mountPath=run/stoker'], /localWorkers\/mountPath/],
  ['a local worker with no threads', ['--set', 'exampleJob.localWorkers.threads=0'], /localWorkers\/threads/],
  ['a local worker draining past the pod\'s grace', ['--set', 'exampleJob.localWorkers.drainGraceSeconds=30'],
    /localWorkers\/drainGraceSeconds/],
  ['a local worker CPU request above its limit', ['--set', 'exampleJob.enabled=true', '--set',
    'exampleJob.localWorkers.enabled=true', '--set', 'exampleJob.localWorkers.resources.limits.cpu=1'],
  /exampleJob.localWorkers.resources: requests.cpu \(2\) is above limits.cpu \(1\)/],
  ['a key file without its secret', ['--set-file', `security.keys.worker=${keyDir}/bad.key`],
    /security.keys.worker has no secret key line/],
  ['a team name that cannot name a Secret', ['--set', 'security.teams={Team_A}'], /security\/teams\/0'.*does not match/],
  ['a team named twice', ['--set', 'security.teams={team-a,team-a}'], /security\/teams'.*are equal/],
  ['a team name of 64 characters', ['--set', `security.teams={${'a'.repeat(64)}}`], /security\/teams\/0'.*maxLength/],
  ['a team key under a bad name', teamKey('Team_A', 'client-team-a.key'), /invalid propertyName 'Team_A'/, TEAM_KEYS],
  ['another team\'s key', teamKey('team-b', 'client-team-a.key'), /security.keys.teams.team-b is another team's key/,
    TEAM_KEYS],
  ['a team key the trust file does not list', teamKey('team-c'), /security.trust does not list team team-c's key/,
    TEAM_KEYS],
  ['a worker key as a team\'s', teamKey('team-a', 'worker.key'), /security.keys.teams.team-a is not a client key/,
    TEAM_KEYS],
  ['a team without its key, keys given', ['--set', 'security.teams={team-a}'], /security.teams names team-a, but/,
    TEAM_KEYS],
  // The example Job's client key is named after the release (made by the hook) or as its file says (given): a team of
  // that name would share its identity.
  ['a team named as the release, keys made', ['--set', 'security.teams={rel}'],
    /team rel has the name of the example Job's client key/, []],
  ['a team named as the example key given', ['--set', 'security.teams={local}'],
    /team local has the name of the example Job's client key/],
];
// No refusal shows a secret key.
const SECRETS = [keyDir, teamDir].flatMap((dir) => readdirSync(dir).filter((f) => f.endsWith('.key'))
  .map((f) => readFileSync(path.join(dir, f), 'utf8').match(/^secret = (\S+)$/m)?.[1]).filter(Boolean));

// helm lint cannot declare API versions, so the cases that need a CRD are linted by rendering only.
for (const [name, files, extra, , keys = KEYS] of cases.filter(([, , extra]) => !extra.includes('keda.sh/v1alpha1'))) {
  const lint = helmRun(['lint', chart, '--strict', '--kube-version', '1.29.0',
    ...files.flatMap((f) => ['-f', path.join(chart, f)]), ...keys,
    ...extra.filter((a, i) => a.startsWith('--set') || extra[i - 1]?.startsWith('--set'))]);
  check(lint.status === 0, `${name}: helm lint --strict failed:\n${lint.stdout}${lint.stderr}`);
  console.log(`${lint.status === 0 ? 'ok  ' : 'FAIL'} helm lint --strict ${files.join(' ')}`);
}
for (const [name, files, extra, assertions, keys = KEYS] of cases) {
  const before = failures;
  const docs = render(files, extra, keys);
  assertions(docs, await common(docs, name));
  console.log(`${failures === before ? 'ok  ' : 'FAIL'} ${name}: ${docs.length} manifests (${[...new Set(docs.map((d) => d.kind))].join(', ')})`);
}
for (const [name, args, expected, keys = KEYS] of refused) {
  const r = helmRun(['template', 'rel', chart, ...keys, ...args]);
  const ok = r.status !== 0 && expected.test(r.stderr) && !SECRETS.some((secret) => r.stderr.includes(secret));
  check(ok, `refused ${name}: exit ${r.status}, ${r.stderr.trim()}`);
  const reason = r.stderr.split('\n').filter((l) => /error|at '/i.test(l)).pop() || r.stderr.trim();
  console.log(`${ok ? 'ok  ' : 'FAIL'} refuses ${name}: ${reason.trim()}`);
}
// README's helm commands, exactly as written (backslash-continued lines joined, comments dropped), run offline.
const readme = readFileSync(path.join(repo, 'README.md'), 'utf8');
const blocks = [...readme.matchAll(/^```[^\n]*\n([\s\S]*?)^```/gm)].map((m) => m[1]);
const commands = blocks.flatMap((b) => b.replace(/\\\n/g, ' ').split('\n'))
  .map((line) => line.replace(/\s#.*$/, '').replace(/\s+/g, ' ').trim())
  .filter((line) => /^helm (install|upgrade)\b/.test(line));
check(commands.some((c) => /^helm install stoker helm\/stoker -n stoker --create-namespace --set dataset\./.test(c)),
  `README shows no 'helm install stoker helm/stoker -n stoker --create-namespace --set dataset...' (found ${commands.length} helm commands)`);
for (const command of commands) {
  const args = command.split(/\s+/).slice(1);
  check(args.every((a) => !/["'$`*?]/.test(a)), `README: "${command}" needs a shell to read; this test splits on spaces`);
  const r = helmRun([...args, '--dry-run=client', '-o', 'json']);
  check(r.status === 0, `README: "${command}" fails:\n${r.stderr}`);
  if (r.status !== 0) continue;
  const release = JSON.parse(r.stdout);
  const docs = [...parseManifests(release.manifest), ...(release.hooks || []).flatMap((h) => parseManifests(h.manifest))];
  const before = failures;
  await common(docs, `README: ${command}`);
  if (!/security\.(keys|existingSecrets|trust)|security\.curve=false/.test(command)) {
    checkKeyHook(docs, `README: ${command}`);
  }
  console.log(`${failures === before ? 'ok  ' : 'FAIL'} README: ${command}: ${docs.length} manifests, keys made by ${
    hookWrites(docs) ? 'the key hook' : 'the operator'}`);
}
// The notes after install name each team's Secret, made or given, or recommend keys per team when there are none.
for (const [name, args, expected] of [
  ['teams', ['--set', 'security.teams={team-a,team-b}'],
    /\n {2}team-a: Secret stoker-client-team-a-key\n {2}team-b: Secret stoker-client-team-b-key\n/],
  ['team keys given', [...TEAM_KEYS, ...teamKey('team-a')], /\n {2}team-a: Secret stoker-client-team-a-key\n/],
  ['no teams', [], /Per-team keys are the recommended default: install with\n--set security.teams='\{team-a,team-b\}'/],
]) {
  const r = helmRun(['install', 'stoker', chart, '-n', 'stoker', '--set',
    'dataset.volume.persistentVolumeClaim.claimName=imagenet', ...args, '--dry-run=client', '-o', 'json']);
  const notes = r.status === 0 ? JSON.parse(r.stdout).info.notes : r.stderr;
  check(expected.test(notes), `notes with ${name} do not match ${expected}:\n${notes}`);
  console.log(`${expected.test(notes) ? 'ok  ' : 'FAIL'} notes with ${name}`);
}
console.log(`${checks} checks, ${failures} failed`);
process.exit(failures ? 1 : 0);
