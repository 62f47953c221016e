#!/usr/bin/env bash
# Installs everything stoker needs to build and test, from Debian 12 packages only.
# Used by the README's commands, by .ci/run and (later) by the Dockerfiles, so all of them build the same way.
# Idempotent: packages already present are not fetched again. Runs apt-get through sudo when not root.
set -euo pipefail

BUILD_PACKAGES=(
  build-essential cmake pkg-config
  libzmq3-dev cppzmq-dev          # transport
  capnproto libcapnp-dev          # wire format and manifests
  prometheus-cpp-dev              # metrics
  libopencv-core-dev libopencv-imgproc-dev   # augmentation (not the umbrella libopencv-dev: ~300 GUI packages)
  libopencv-imgcodecs-dev         # PNG and other non-JPEG formats, and the decode-only baseline
  libjpeg62-turbo-dev             # libjpeg-turbo's libjpeg API: crop-region and DCT-scaled decode
  libgtest-dev libgmock-dev libbenchmark-dev
)
# The observability tests: a real Prometheus server and promtool, the rule file's YAML, the panel renderer.
# STOKER_DEPS=build skips them (images that only build need none of them).
TEST_PACKAGES=(
  prometheus
  python3 python3-yaml python3-matplotlib
)
if [ "${STOKER_DEPS:-all}" != "build" ]; then
  BUILD_PACKAGES+=("${TEST_PACKAGES[@]}")
fi

missing=()
for p in "${BUILD_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#BUILD_PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
