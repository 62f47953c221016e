#!/usr/bin/env bash
# Compiles what the CPU images carry, the one way both of their sources do it: docker/Dockerfile's binaries-source
# stage inside the image, and the container test on the host before building the images with STOKER_BINARIES=
# prebuilt. Release, without tests, benchmarks or CUDA, through scripts/build.sh (which installs the packages).
#   docker/build-binaries.sh BUILD_DIR          (STOKER_WITH_IMGCODECS=ON adds OpenCV imgcodecs; default OFF)
# STOKER_UNITY_BUILD=ON compiles each target's sources eight to a translation unit (CMAKE_UNITY_BUILD): about a third
# less compile time, for the container test, which builds images only to run them; the images' own build
# (docker/Dockerfile) compiles file by file, as the main build does.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: docker/build-binaries.sh BUILD_DIR" >&2; exit 2; }
cd "$(dirname "$0")/.."
STOKER_BUILD_DIR=$1 STOKER_BUILD_TYPE=Release scripts/build.sh -DSTOKER_BUILD_TESTS=OFF -DSTOKER_BUILD_BENCH=OFF \
  -DSTOKER_WITH_CUDA=OFF -DSTOKER_WITH_IMGCODECS="${STOKER_WITH_IMGCODECS:-OFF}" \
  -DCMAKE_UNITY_BUILD="${STOKER_UNITY_BUILD:-OFF}"
