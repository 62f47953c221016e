"""The chart's key hook (templates/keys-job.yaml): makes a release's CURVE keys when none were given.

For each role (coordinator, worker, client) it keeps the role's Secret if it already exists (a reinstall, or a run
that stopped half-way), else makes a key pair with `stoker keygen` and creates the Secret (key `key`, the key file);
so too for each team (--team), whose client key is named after the team (identity client:<team>: a team is its
key's name). Then it creates the trust ConfigMap (key `trust`) from all their public keys, or, if it exists, checks
that it lists them: a team's key it does not list (a team an upgrade added, or one whose Secret was deleted to make
it anew) is written in, replacing any earlier line of that team; any other key missing fails. Each object carries Helm's ownership metadata, so a later `helm upgrade` that passes keys of your
own takes them over. Secret key text is never printed; the trust lines are public.

It talks to the Kubernetes API with the pod's service-account token, whose Role allows reading only these objects
and creating Secrets and ConfigMaps in the release's namespace. Python's standard library only: the CPU trainer
image carries python3 and stoker.

  python3 make-keys.py --namespace NS --name NAME --secret coordinator=SECRET --secret worker=SECRET \
      --secret client=SECRET [--team TEAM=SECRET ...] --trust CONFIGMAP [--label KEY=VALUE ...]
      [--annotation KEY=VALUE ...] [--api URL] [--token-file FILE] [--ca-file FILE] [--stoker PATH]
"""
import argparse
import base64
import json
import os
import pathlib
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
ROLES = ("coordinator", "worker", "client")


class Failure(Exception):
    pass


class Api:
    def __init__(self, base, token_file, ca_file):
        self.base = base.rstrip("/")
        self.token_file = token_file
        self.context = ssl.create_default_context(cafile=ca_file) if self.base.startswith("https:") else None

    def call(self, method, path, body=None):
        token = pathlib.Path(self.token_file).read_text().strip()  # read each time: projected tokens rotate
        request = urllib.request.Request(
            self.base + path, method=method, data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": "Bearer " + token, "Accept": "application/json",
                     "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30) as answer:
                return answer.status, json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                return e.code, json.loads(text)
            except ValueError:
                return e.code, {"message": text[:200]}
        except (urllib.error.URLError, OSError) as e:
            raise Failure(f"cannot reach the Kubernetes API at {self.base}: {e}")


def fields(key_text):
    out = {}
    for line in key_text.splitlines():
        name, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#"):
            out[name.strip()] = value.strip()
    return out


def trust_line(key_text):
    f = fields(key_text)
    return f"{f['role']} {f['name']} {f['public']}"


def keygen(stoker, role, name, directory):
    made = subprocess.run([stoker, "keygen", "--role", role, "--name", name, "--out", directory],
                          capture_output=True, text=True)
    if made.returncode != 0:
        raise Failure(f"stoker keygen --role {role}: {made.stderr.strip()}")
    return pathlib.Path(directory, f"{role}-{name}.key").read_text()


def metadata(name, args):
    return {"name": name, "namespace": args.namespace, "labels": dict(args.label),
            "annotations": dict(args.annotation)}


def role_key(api, args, role, secret, directory, team=None):
    """The key file in `secret`, made (named args.name, or `team`) if the Secret does not exist."""
    name = team or args.name
    path = f"/api/v1/namespaces/{args.namespace}/secrets"
    for attempt in range(2):
        code, found = api.call("GET", f"{path}/{secret}")
        if code == 200:
            text = base64.b64decode(found.get("data", {}).get("key", "")).decode(errors="replace")
            f = fields(text)
            if f.get("role") != role or not f.get("public") or not f.get("name") or (team and f["name"] != team):
                what = f"team {team}'s key (a {role} key named {team})" if team else f"a {role} key file"
                raise Failure(f"Secret {secret} exists but its 'key' is not {what}: delete it (kubectl -n "
                              f"{args.namespace} delete secret {secret}) or give the chart the keys yourself "
                              f"(docs/operations.md section 9)")
            print(f"{role}: kept the key in Secret {secret} ({role}:{f['name']})")
            return text
        if code != 404:
            raise Failure(f"reading Secret {secret}: HTTP {code}: {found.get('message', '')}")
        if attempt:
            break
        text = keygen(args.stoker, role, name, directory)
        body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": metadata(secret, args),
                "data": {"key": base64.b64encode(text.encode()).decode()}}
        code, answer = api.call("POST", path, body)
        if code in (200, 201):
            print(f"{role}: made a key, Secret {secret} ({role}:{name})")
            return text
        if code != 409:  # 409: made meanwhile by another run; read that one
            raise Failure(f"creating Secret {secret}: HTTP {code}: {answer.get('message', '')}")
    raise Failure(f"Secret {secret} was created and then vanished")


def add_team_lines(api, args, found, team_lines):
    """Writes `team_lines` into the trust ConfigMap `found`, each in place of the lines of its identity; False if
    the ConfigMap changed since it was read (read it again)."""
    replaced = {tuple(line.split()[:2]) for line in team_lines}
    kept = [line for line in found["data"]["trust"].splitlines()
            if line.lstrip().startswith("#") or tuple(line.split()[:2]) not in replaced]
    found["data"]["trust"] = "".join(line + "\n" for line in kept + team_lines)
    path = f"/api/v1/namespaces/{args.namespace}/configmaps/{args.trust}"
    code, answer = api.call("PUT", path, found)  # carries the resourceVersion read: refused if it changed since
    if code == 409:
        return False
    if code != 200:
        raise Failure(f"updating ConfigMap {args.trust}: HTTP {code}: {answer.get('message', '')}")
    print(f"trust: listed in ConfigMap {args.trust}:\n  " + "\n  ".join(team_lines))
    return True


def trust_config_map(api, args, keys, team_keys):
    path = f"/api/v1/namespaces/{args.namespace}/configmaps"
    teams = [trust_line(text) for text in team_keys]
    lines = [trust_line(text) for text in keys] + teams
    for _ in range(5):
        code, found = api.call("GET", f"{path}/{args.trust}")
        if code != 200:
            break
        found.setdefault("data", {}).setdefault("trust", "")
        listed = {tuple(line.split()) for line in found["data"]["trust"].splitlines()
                  if line.strip() and not line.lstrip().startswith("#")}
        missing = [line for line in lines if tuple(line.split()) not in listed]
        others = [line for line in missing if line not in teams]
        if others:
            raise Failure(f"ConfigMap {args.trust} exists but does not list the keys of the Secrets: add these lines "
                          f"to its 'trust', or delete it (kubectl -n {args.namespace} delete configmap {args.trust}) "
                          "and install again:\n  " + "\n  ".join(others))
        if not missing:
            print(f"trust: ConfigMap {args.trust} lists the {len(lines)} keys")
            return
        if add_team_lines(api, args, found, missing):
            return
    else:
        raise Failure(f"ConfigMap {args.trust} changed under every one of 5 updates: run the upgrade again")
    if code != 404:
        raise Failure(f"reading ConfigMap {args.trust}: HTTP {code}: {found.get('message', '')}")
    text = "# the public keys this release trusts (made by the chart's key hook; stoker keygen)\n" + \
        "".join(line + "\n" for line in lines)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(args.trust, args), "data": {"trust": text}}
    code, answer = api.call("POST", path, body)
    if code == 409:
        return trust_config_map(api, args, keys, team_keys)  # made meanwhile: check that one
    if code not in (200, 201):
        raise Failure(f"creating ConfigMap {args.trust}: HTTP {code}: {answer.get('message', '')}")
    print(f"trust: made ConfigMap {args.trust}:\n  " + "\n  ".join(lines))


def pair(text):
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--name", required=True, help="the keys' name: identities are <role>:<name>")
    parser.add_argument("--secret", type=pair, action="append", required=True, help="ROLE=SECRET, one per role")
    parser.add_argument("--team", type=pair, action="append", default=[],
                        help="TEAM=SECRET: a client key named TEAM, in that Secret")
    parser.add_argument("--trust", required=True, help="the trust ConfigMap")
    parser.add_argument("--label", type=pair, action="append", default=[])
    parser.add_argument("--annotation", type=pair, action="append", default=[])
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST", ""), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    parser.add_argument("--api", default=f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}")
    parser.add_argument("--token-file", default=f"{ACCOUNT}/token")
    parser.add_argument("--ca-file", default=f"{ACCOUNT}/ca.crt")
    parser.add_argument("--stoker", default="stoker")
    args = parser.parse_args()
    secrets = dict(args.secret)
    if sorted(secrets) != sorted(ROLES):
        parser.error("--secret must name one Secret for each of coordinator, worker and client")
    if len(dict(args.team)) != len(args.team):
        parser.error("--team names a team twice")
    api = Api(args.api, args.token_file, args.ca_file)
    try:
        with tempfile.TemporaryDirectory() as directory:
            keys = [role_key(api, args, role, secrets[role], directory) for role in ROLES]
            team_keys = [role_key(api, args, "client", secret, tempfile.mkdtemp(dir=directory), team=team)
                         for team, secret in args.team]  # a directory each: a team may share the release's name
        trust_config_map(api, args, keys, team_keys)
    except Failure as e:
        print(f"make-keys: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
