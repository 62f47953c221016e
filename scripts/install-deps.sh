#!/usr/bin/env bash
# Installs everything stoker needs to build and test, from Debian 12 packages only.
# Used by the README's commands, by .ci/run and by the Dockerfiles (docker/), so all of them build the same way.
# Idempotent: packages already present are not fetched again. Runs apt-get through sudo when not root.
# STOKER_DEPS picks the set (all: build + tests, the default; build; coordinator|worker|trainer: runtime only);
# --list prints the set instead of installing it.
set -euo pipefail

BUILD_PACKAGES=(
  build-essential cmake pkg-config
  libzmq3-dev cppzmq-dev          # transport
  libsodium-dev                   # keyed BLAKE2b (data tickets, auth/data_tickets.h) and X25519 (auth/seal.h)
  libssl-dev                      # HKDF-SHA256 and AES-256-GCM: sealed batches (auth/seal.h)
  capnproto libcapnp-dev          # wire format and manifests
  prometheus-cpp-dev              # metrics
  libcurl4-openssl-dev            # object storage: S3 (SigV4 signed by libcurl) and HTTP(S) by range
  libopencv-core-dev libopencv-imgproc-dev   # augmentation (not the umbrella libopencv-dev: ~300 GUI packages)
  libopencv-imgcodecs-dev         # PNG and other non-JPEG formats, and the decode-only baseline
  libjpeg62-turbo-dev             # libjpeg-turbo's libjpeg API: crop-region and DCT-scaled decode
  libturbojpeg0-dev               # libjpeg-turbo's TurboJPEG API: JPEGs cut losslessly to a crop (gpu_decode jobs)
  libgtest-dev libgmock-dev libbenchmark-dev
)
# AES-256-GCM at AVX-512/VAES speed for sealed batches (auth/seal.h): Debian packages intel-ipsec-mb for x86-64
# only; elsewhere the build seals with OpenSSL.
IPSEC_MB=()
[ "$(dpkg --print-architecture 2>/dev/null || echo amd64)" = amd64 ] && IPSEC_MB=(libipsec-mb)
BUILD_PACKAGES+=("${IPSEC_MB[@]/%/-dev}")
# The observability tests: a real Prometheus server and promtool, the rule file's YAML, the panel renderer; the
# Python package's tests: Debian's PyTorch and torchvision (CPU builds) for the host path, DDP over gloo and the
# examples, and pip, venv and wheel to build the package's wheel and install it in a clean environment.
# STOKER_DEPS=build skips them (images that only build need none of them).
TEST_PACKAGES=(
  prometheus
  python3 python3-yaml python3-matplotlib
  python3-torch python3-torchvision python3-pip python3-venv python3-wheel   # the Python package's tests
  clang-14                        # the sanitizer builds and libFuzzer targets (scripts/sanitize.sh), which also
  libclang-rt-14-dev              # check the lock annotations with -Wthread-safety
  nginx                           # the web server the object-storage tests read shards from by range
)
# The container test (tests/containers): Debian's Docker engine, which the test starts itself, and debootstrap for
# the base image (no registry is reachable from CI). Not with STOKER_SKIP_CONTAINERS=1, the developer's opt-out;
# a machine that already has a dockerd (Docker's own packages) keeps it.
if [ "${STOKER_SKIP_CONTAINERS:-0}" != 1 ]; then
  TEST_PACKAGES+=(debootstrap)
  command -v dockerd >/dev/null || [ -x /usr/sbin/dockerd ] || TEST_PACKAGES+=(docker.io)
fi
if [ "${STOKER_DEPS:-all}" = "all" ]; then
  BUILD_PACKAGES+=("${TEST_PACKAGES[@]}")
fi

# Runtime only (the images' last stage): STOKER_DEPS=coordinator, worker or trainer installs just the shared
# libraries that binary set loads (readelf -d NEEDED, mapped to Debian packages), nothing to build with.
# The worker's OpenCV imgcodecs (PNG and other non-JPEG formats) pulls in GDAL and ~150 more packages;
# STOKER_WITH_IMGCODECS=OFF leaves it out for a JPEG-only worker built the same way.
RUNTIME_CORE=(libzmq5 libsodium23 libssl3 "${IPSEC_MB[@]/%/1}" libcapnp-0.9.2 libprometheus-cpp-core1.0)
RUNTIME_IMAGE=(libjpeg62-turbo libturbojpeg0 libopencv-core406 libopencv-imgproc406)
RUNTIME_STORAGE=(libcurl4 ca-certificates)   # the worker and `stoker index` read object storage (https needs CAs)
case "${STOKER_DEPS:-all}" in
  coordinator) BUILD_PACKAGES=("${RUNTIME_CORE[@]}") ;;
  worker)
    BUILD_PACKAGES=("${RUNTIME_CORE[@]}" "${RUNTIME_IMAGE[@]}" "${RUNTIME_STORAGE[@]}")
    [ "${STOKER_WITH_IMGCODECS:-ON}" = "OFF" ] || BUILD_PACKAGES+=(libopencv-imgcodecs406) ;;
  # The CPU trainer image: `stoker` (consume) and the client library, and the Python package with numpy.
  trainer) BUILD_PACKAGES=("${RUNTIME_CORE[@]}" "${RUNTIME_IMAGE[@]}" "${RUNTIME_STORAGE[@]}" python3 python3-numpy) ;;
  all|build) ;;
  *) echo "install-deps: STOKER_DEPS must be all, build, coordinator, worker or trainer" >&2; exit 2 ;;
esac

if [ "${1:-}" = "--list" ]; then  # print the packages of this STOKER_DEPS mode (docker/check_images.py) and stop
  echo "${BUILD_PACKAGES[@]}"
  exit 0
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
