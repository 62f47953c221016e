// The chart's key hook (helm/stoker/templates/keys-job.yaml, files/make-keys.py) against a fake Kubernetes API: the
// command exactly as the chart renders it for README's `helm install`, with only the API's address, the token file
// and the stoker binary pointed at this machine, makes a coordinator, a worker and a client key with the real
// `stoker keygen`, each in the Secret its role's pods mount, and the trust ConfigMap listing the three; a second run
// keeps them; a run after a partial one completes it; damage it cannot repair (a trust file without the keys, a
// Secret holding another role's key) fails, saying what to do, and no secret key text is ever printed. With
// security.teams it also makes a client key named after each team, in that team's Secret, listed in the trust file;
// an upgrade that adds a team (or follows a team's Secret deleted to make it anew) writes that team's line in.
//
//   node tests/deploy/keys_hook_test.mjs --helm .tools/helm/helm --bin build/bin
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseManifests } from './kube_schema.mjs';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const arg = (name, fallback) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? path.resolve(process.argv[i + 1]) : fallback;
};
const helm = arg('--helm', path.join(repo, '.tools/helm/helm'));
const stoker = path.join(arg('--bin', path.join(repo, 'build/bin')), 'stoker');
const TOKEN = 'test-token';
const work = mkdtempSync(path.join(os.tmpdir(), 'stoker-keys-hook-'));
process.on('exit', () => rmSync(work, { recursive: true, force: true }));
writeFileSync(path.join(work, 'token'), `${TOKEN}\n`);

// The hook Job's command, from the chart rendered as README installs it (with `extra` values).
function hookCommand(extra = []) {
  const r = spawnSync(helm, ['install', 'stoker', 'helm/stoker', '-n', 'stoker', '--create-namespace', '--set',
    'dataset.volume.persistentVolumeClaim.claimName=imagenet', ...extra, '--dry-run=client', '-o', 'json'],
  { cwd: repo, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const hooks = JSON.parse(r.stdout).hooks.flatMap((h) => parseManifests(h.manifest));
  const job = hooks.find((d) => d.kind === 'Job' && d.metadata.labels['app.kubernetes.io/component'] === 'keys');
  assert.ok(job, 'README\'s install renders no key hook Job');
  return job.spec.template.spec.containers[0].command;
}
const command = hookCommand();
// Teams. (One named as the release would share the example Job's key's identity, client:stoker: the chart refuses it.)
const teamCommand = hookCommand(['--set', 'security.teams={team-a,team-b}']);

// A namespace's Secrets and ConfigMaps, as the API server keeps them, behind a bearer token: a PUT must carry the
// object's resourceVersion (409 if it changed since), as the real one's optimistic concurrency has it.
function fakeApi() {
  const objects = new Map();  // "secrets/name" -> object
  const requests = [];
  let version = 0;
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      requests.push(`${req.method} ${req.url}`);
      const reply = (code, obj) => { res.writeHead(code, { 'content-type': 'application/json' }); res.end(JSON.stringify(obj)); };
      if (req.headers.authorization !== `Bearer ${TOKEN}`) return reply(401, { message: 'Unauthorized' });
      const m = req.url.match(/^\/api\/v1\/namespaces\/stoker\/(secrets|configmaps)(?:\/([^/]+))?$/);
      if (!m) return reply(403, { message: `forbidden: ${req.url}` });
      const [, kind, name] = m;
      if (req.method === 'GET' && name) {
        const obj = objects.get(`${kind}/${name}`);
        return obj ? reply(200, obj) : reply(404, { message: `${kind} "${name}" not found` });
      }
      if (req.method === 'POST' && !name) {
        const obj = JSON.parse(body);
        const key = `${kind}/${obj.metadata.name}`;
        if (objects.has(key)) return reply(409, { message: 'already exists' });
        obj.metadata.resourceVersion = String(++version);
        objects.set(key, obj);
        return reply(201, obj);
      }
      if (req.method === 'PUT' && name) {
        const obj = JSON.parse(body);
        const held = objects.get(`${kind}/${name}`);
        if (!held) return reply(404, { message: `${kind} "${name}" not found` });
        if (obj.metadata?.name !== name || obj.metadata?.resourceVersion !== held.metadata.resourceVersion) {
          return reply(409, { message: 'the object has been modified' });
        }
        obj.metadata.resourceVersion = String(++version);
        objects.set(`${kind}/${name}`, obj);
        return reply(200, obj);
      }
      return reply(403, { message: `forbidden: ${req.method} ${req.url}` });
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({
    objects, requests, url: `http://127.0.0.1:${server.address().port}`, close: () => server.close(),
  })));
}

// Runs `body` against a fresh fake API, closed afterwards whatever happens.
async function withFakeApi(body) {
  const api = await fakeApi();
  try {
    await body(api);
  } finally {
    api.close();
  }
}

function runHook(api, argv = command) {
  const [python, ...rest] = argv;
  const child = spawn(python, [...rest, `--api=${api.url}`, `--token-file=${path.join(work, 'token')}`,
    `--stoker=${stoker}`], { env: { ...process.env, TMPDIR: work } });
  let out = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => { out += d; });
  return new Promise((resolve) => child.on('close', (status) => resolve({ status, out })));
}

const keyText = (secret) => Buffer.from(secret.data.key, 'base64').toString();
const field = (text, name) => text.match(new RegExp(`^${name} = (\\S+)$`, 'm'))?.[1];
function secretsPrinted(api, out) {
  return [...api.objects.values()].filter((o) => o.kind === 'Secret').some((s) => out.includes(field(keyText(s), 'secret')));
}

// The trust ConfigMap lists `role` with the name and public key of its key file (`text`).
function assertTrusts(api, role, text, name = 'stoker') {
  const trust = api.objects.get('configmaps/stoker-trust').data.trust;
  assert.ok(trust.includes(`${role} ${name} ${field(text, 'public')}\n`), `the trust file lacks the ${role} ${name}`);
}

test('makes a key per role and the trust ConfigMap, as the pods mount them', () => withFakeApi(async (api) => {
  const r = await runHook(api);
  assert.equal(r.status, 0, r.out);
  for (const role of ['coordinator', 'worker', 'client']) {
    const secret = api.objects.get(`secrets/stoker-${role}-key`);
    assert.ok(secret, `no Secret for the ${role}`);
    const text = keyText(secret);
    assert.equal(field(text, 'role'), role);
    assert.equal(field(text, 'name'), 'stoker');
    assert.match(text, /^secret = \S{40}$/m);
    assert.equal(secret.metadata.labels['app.kubernetes.io/managed-by'], 'Helm');
    assert.equal(secret.metadata.labels['stoker.io/keys-of'], 'stoker');
    assert.equal(secret.metadata.annotations['meta.helm.sh/release-name'], 'stoker');
    assert.equal(secret.metadata.annotations['meta.helm.sh/release-namespace'], 'stoker');
    assertTrusts(api, role, text);
  }
  assert.ok(!secretsPrinted(api, r.out), 'a secret key was printed');
}));

test('a second run keeps the keys; a run after a partial one completes it', () => withFakeApi(async (api) => {
  assert.equal((await runHook(api)).status, 0);
  const first = new Map([...api.objects].map(([k, v]) => [k, JSON.stringify(v)]));
  const again = await runHook(api);
  assert.equal(again.status, 0, again.out);
  for (const [k, v] of first) assert.equal(JSON.stringify(api.objects.get(k)), v, `${k} changed`);
  assert.equal(api.requests.filter((r) => r.startsWith('POST')).length, 4, 'the second run created something');

  const coordinator = api.objects.get('secrets/stoker-coordinator-key');
  api.objects.delete('secrets/stoker-worker-key');  // a run that stopped after the coordinator's key
  api.objects.delete('secrets/stoker-client-key');
  api.objects.delete('configmaps/stoker-trust');
  const completed = await runHook(api);
  assert.equal(completed.status, 0, completed.out);
  assert.equal(JSON.stringify(api.objects.get('secrets/stoker-coordinator-key')), JSON.stringify(coordinator));
  for (const role of ['coordinator', 'worker', 'client']) {
    assertTrusts(api, role, keyText(api.objects.get(`secrets/stoker-${role}-key`)));
  }
}));

test('refuses what it cannot repair, saying what to do', () => withFakeApi(async (api) => {
  assert.equal((await runHook(api)).status, 0);
  api.objects.get('configmaps/stoker-trust').data.trust = '# emptied\n';
  const stale = await runHook(api);
  assert.equal(stale.status, 1);
  assert.match(stale.out, /ConfigMap stoker-trust exists but does not list the keys.*delete it/s);
  assert.ok(!secretsPrinted(api, stale.out), 'a secret key was printed');

  api.objects.delete('configmaps/stoker-trust');
  const worker = api.objects.get('secrets/stoker-worker-key');
  api.objects.set('secrets/stoker-coordinator-key', worker);
  const wrong = await runHook(api);
  assert.equal(wrong.status, 1);
  assert.match(wrong.out, /Secret stoker-coordinator-key exists but its 'key' is not a coordinator key file/);
  assert.ok(!secretsPrinted(api, wrong.out), 'a secret key was printed');
}));

test('makes a client key per team, named after it, in its Secret and the trust file', () => withFakeApi(async (api) => {
  const r = await runHook(api, teamCommand);
  assert.equal(r.status, 0, r.out);
  for (const role of ['coordinator', 'worker', 'client']) {
    assertTrusts(api, role, keyText(api.objects.get(`secrets/stoker-${role}-key`)));
  }
  for (const team of ['team-a', 'team-b']) {
    const secret = api.objects.get(`secrets/stoker-client-${team}-key`);
    assert.ok(secret, `no Secret for team ${team}`);
    const text = keyText(secret);
    assert.equal(field(text, 'role'), 'client');
    assert.equal(field(text, 'name'), team);
    assert.equal(secret.metadata.labels['stoker.io/keys-of'], 'stoker');
    assertTrusts(api, 'client', text, team);
  }
  assert.ok(!secretsPrinted(api, r.out), 'a secret key was printed');
  const again = await runHook(api, teamCommand);
  assert.equal(again.status, 0, again.out);
  assert.equal(api.requests.filter((q) => q.startsWith('POST')).length, 6, 'the second run created something');

  api.objects.delete('configmaps/stoker-trust');  // a team Secret holding another team's key is not taken
  api.objects.set('secrets/stoker-client-team-a-key', api.objects.get('secrets/stoker-client-team-b-key'));
  const wrong = await runHook(api, teamCommand);
  assert.equal(wrong.status, 1);
  assert.match(wrong.out, /Secret stoker-client-team-a-key exists but its 'key' is not team team-a's key/);
  assert.ok(!secretsPrinted(api, wrong.out), 'a secret key was printed');
}));

test('an upgrade that adds a team lists its new key; a team made anew replaces its line', () => withFakeApi(async (api) => {
  assert.equal((await runHook(api, teamCommand)).status, 0);
  const before = new Map([...api.objects].map(([k, v]) => [k, JSON.stringify(v)]));
  const added = await runHook(api, hookCommand(['--set', 'security.teams={team-a,team-b,team-c}']));
  assert.equal(added.status, 0, added.out);
  for (const [k, v] of before) {
    if (k !== 'configmaps/stoker-trust') assert.equal(JSON.stringify(api.objects.get(k)), v, `${k} changed`);
  }
  const teamC = keyText(api.objects.get('secrets/stoker-client-team-c-key'));
  assertTrusts(api, 'client', teamC, 'team-c');
  for (const role of ['coordinator', 'worker', 'client']) {
    assertTrusts(api, role, keyText(api.objects.get(`secrets/stoker-${role}-key`)));
  }
  for (const team of ['team-a', 'team-b']) {
    assertTrusts(api, 'client', keyText(api.objects.get(`secrets/stoker-client-${team}-key`)), team);
  }
  assert.equal(api.requests.filter((q) => q.startsWith('PUT')).length, 1, 'not one update of the trust file');
  assert.ok(!secretsPrinted(api, added.out), 'a secret key was printed');

  // Team A's key made anew (its Secret deleted): its new line replaces the old, which no longer admits anyone.
  const oldA = field(keyText(api.objects.get('secrets/stoker-client-team-a-key')), 'public');
  api.objects.delete('secrets/stoker-client-team-a-key');
  const anew = await runHook(api, teamCommand);
  assert.equal(anew.status, 0, anew.out);
  const newA = keyText(api.objects.get('secrets/stoker-client-team-a-key'));
  assertTrusts(api, 'client', newA, 'team-a');
  const trust = api.objects.get('configmaps/stoker-trust').data.trust;
  assert.ok(!trust.includes(oldA), 'the team\'s old key is still trusted');
  assert.equal(trust.match(/^client team-a /gm).length, 1, 'team-a is listed more than once');
  assertTrusts(api, 'client', teamC, 'team-c');  // a team the values no longer name keeps its line (its key too)

  // A trust file that lacks a role's key is still refused, teams or not.
  const coordinatorLine = `coordinator stoker ${field(keyText(api.objects.get('secrets/stoker-coordinator-key')), 'public')}\n`;
  const cm = api.objects.get('configmaps/stoker-trust');
  cm.data.trust = cm.data.trust.replace(coordinatorLine, '');
  const stale = await runHook(api, teamCommand);
  assert.equal(stale.status, 1);
  assert.match(stale.out, /ConfigMap stoker-trust exists but does not list the keys/);
}));

test('an update that meets a newer trust file reads it again', () => withFakeApi(async (api) => {
  assert.equal((await runHook(api)).status, 0);
  // Another writer changes the ConfigMap between the hook's read and its update, once: the hook's PUT carries the
  // version it read, is refused, and the hook reads again and keeps the other writer's line.
  let raced = false;
  const get = Map.prototype.get;
  api.objects.get = function (key) {
    const obj = get.call(this, key);
    if (key === 'configmaps/stoker-trust' && !raced && api.requests.at(-1)?.startsWith('GET /api/v1/namespaces/stoker/configmaps')) {
      raced = true;
      const copy = structuredClone(obj);
      obj.data.trust += 'client other 0000000000000000000000000000000000000000\n';
      obj.metadata.resourceVersion = 'raced';
      return copy;
    }
    return obj;
  };
  const r = await runHook(api, teamCommand);
  assert.equal(r.status, 0, r.out);
  assert.ok(raced, 'the race was not staged');
  const trust = api.objects.get('configmaps/stoker-trust').data.trust;
  assert.match(trust, /^client other 0{40}$/m, 'the other writer\'s line was lost');
  for (const team of ['team-a', 'team-b']) {
    assertTrusts(api, 'client', keyText(api.objects.get(`secrets/stoker-client-${team}-key`)), team);
  }
}));

test('without the token the API refuses it, and it says so', () => withFakeApi(async (api) => {
  writeFileSync(path.join(work, 'token'), 'wrong\n');
  try {
    const r = await runHook(api);
    assert.equal(r.status, 1);
    assert.match(r.out, /HTTP 401/);
    assert.equal(api.objects.size, 0);
  } finally {
    writeFileSync(path.join(work, 'token'), `${TOKEN}\n`);
  }
}));
