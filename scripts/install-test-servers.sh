#!/usr/bin/env bash
# Installs the S3-compatible server the object-storage tests and benchmark start (tests/objectstore: s3rver, the
# @20minutes fork that checks SigV4 signatures, pinned by the committed package-lock.json) into the ignored
# tests/objectstore/node_modules with npm ci. nginx, the other server they use, is a Debian package
# (scripts/install-deps.sh). Idempotent: node_modules matching the lock file is left alone.
# Needs node + npm (installed from Debian through apt-get, with sudo when not root, if missing).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "install-test-servers: installing nodejs npm from Debian"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends nodejs npm
fi

stamp=tests/objectstore/node_modules/.package-lock.sha256
if [ -f "$stamp" ] && sha256sum --check --status "$stamp" 2>/dev/null; then
  echo "install-test-servers: tests/objectstore/node_modules matches package-lock.json"
else
  echo "install-test-servers: npm ci in tests/objectstore (s3rver, ~15 MB)"
  npm ci --prefix tests/objectstore --no-audit --no-fund --loglevel=error
  sha256sum tests/objectstore/package-lock.json > "$stamp"
fi
