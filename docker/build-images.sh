#!/usr/bin/env bash
# Builds stoker's CPU images from docker/Dockerfile with Debian's docker.io (BuildKit; Debian's docker 20.10 has no
# buildx, so `DOCKER_BUILDKIT=1 docker build`), tags them as the Helm chart names them, and prints their sizes.
#   docker/build-images.sh [--prebuilt BUILD_DIR] [--imgcodecs] [--only coordinator,worker,trainer]
# Default: compiled inside the image (the binaries-source stage; Release, no CUDA). --prebuilt stages a Debian 12
# build made outside (docker/stage-build.sh) into a fresh build context and builds with STOKER_BINARIES=prebuilt;
# the worker then follows that build's STOKER_WITH_IMGCODECS. --imgcodecs builds the worker with OpenCV imgcodecs
# (PNG and other formats; GDAL comes with it) as the -imgcodecs variant.
# Tags: ${STOKER_IMAGE_PREFIX:-ghcr.io/stoker-project/}stoker-coordinator:0.1.0, stoker-worker:0.1.0 (JPEG only) or
# :0.1.0-imgcodecs, stoker-trainer:0.1.0-cpu (the CUDA trainer, docker/trainer-cuda.Dockerfile, is :0.1.0).
# The base, debian:bookworm-slim, must be in the engine: `docker pull` it, or docker/make-base-image.sh.
# DOCKER (default /usr/bin/docker) and DOCKER_HOST pick the engine. Logs: $STOKER_IMAGE_LOGS (default /tmp).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
DOCKER=${DOCKER:-/usr/bin/docker}
prefix=${STOKER_IMAGE_PREFIX:-ghcr.io/stoker-project/}
version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$repo/helm/stoker/Chart.yaml")
logs=${STOKER_IMAGE_LOGS:-/tmp}
prebuilt=""
imgcodecs=OFF
only=coordinator,worker,trainer
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt) prebuilt=$2; shift 2 ;;
    --imgcodecs) imgcodecs=ON; shift ;;
    --only) only=$2; shift 2 ;;
    *) echo "usage: docker/build-images.sh [--prebuilt BUILD_DIR] [--imgcodecs] [--only LIST]" >&2; exit 2 ;;
  esac
done

args=(--network=host --progress=plain -f "$repo/docker/Dockerfile")
context=$repo
if [ -n "$prebuilt" ]; then
  built=$(sed -n 's/^STOKER_WITH_IMGCODECS:BOOL=//p' "$prebuilt/CMakeCache.txt")
  if [ "$imgcodecs" = ON ] && [ "$built" != ON ]; then
    echo "build-images: --imgcodecs, but $prebuilt is built with imgcodecs $built" >&2
    exit 2
  fi
  imgcodecs=$built
  context=$(mktemp -d "${TMPDIR:-/tmp}/stoker-image-context.XXXXXX")
  trap 'rm -rf "$context"' EXIT
  install -D -m 755 "$repo/scripts/install-deps.sh" "$context/scripts/install-deps.sh"
  "$repo/docker/stage-build.sh" "$prebuilt" "$context/stage"
  args+=(--build-arg STOKER_BINARIES=prebuilt)
fi
args+=(--build-arg "STOKER_WITH_IMGCODECS=$imgcodecs")

tags=()
for target in ${only//,/ }; do
  case "$target" in
    coordinator) tag="${prefix}stoker-coordinator:$version" ;;
    worker) tag="${prefix}stoker-worker:$version$([ "$imgcodecs" = ON ] && echo -imgcodecs || true)" ;;
    trainer) tag="${prefix}stoker-trainer:$version-cpu" ;;
    *) echo "build-images: no target $target (coordinator, worker, trainer)" >&2; exit 2 ;;
  esac
  log="$logs/stoker-image-$target.log"
  start=$(date +%s)
  if ! DOCKER_BUILDKIT=1 "$DOCKER" build "${args[@]}" --target "$target" -t "$tag" "$context" > "$log" 2>&1; then
    tail -n 40 "$log"
    echo "build-images: $target failed; the whole log is $log" >&2
    exit 1
  fi
  echo "build-images: $tag in $(( $(date +%s) - start )) s"
  tags+=("$tag")
done
for tag in "${tags[@]}"; do
  "$DOCKER" image inspect -f '{{.Size}}' "$tag" | awk -v t="$tag" '{printf "  %-60s %5.0f MB\n", t, $1 / 1e6}'
done
