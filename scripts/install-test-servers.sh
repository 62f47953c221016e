#!/usr/bin/env bash
# Installs the S3-compatible server the object-storage tests and benchmark start (tests/objectstore: s3rver, the
# @20minutes fork that checks SigV4 signatures, pinned by the committed package-lock.json) into the ignored
# tests/objectstore/node_modules with npm ci. nginx, the other server they use, is a Debian package
# (scripts/install-deps.sh). Idempotent: node_modules matching the lock file is left alone.
# Needs node + npm (installed from Debian through apt-get, with sudo when not root, if missing).
set -euo pipefail
cd "$(dirname "$0")/.."

WHO=install-test-servers
source scripts/install-common.sh

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  apt_install nodejs npm
fi
npm_ci tests/objectstore "s3rver, ~15 MB"
