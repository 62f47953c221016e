#!/usr/bin/env bash
# Builds the binaries the GPU machine runs (it has none of our Debian libraries and no network) and gathers them
# with the shared libraries they load into .bundle/ (ignored by git), for the device tool's `carry`.
# OpenCV imgcodecs is left out: it drags in GDAL (~190 MB); the bundled worker decodes JPEG only.
#   scripts/bundle-gpu.sh            then on the GPU machine: export LD_LIBRARY_PATH=$PWD/.bundle/lib
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build-bundle -DCMAKE_BUILD_TYPE=Release -DSTOKER_WITH_IMGCODECS=OFF -DSTOKER_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 > build-bundle.configure.log
BINARIES="stoker stoker-coordinator stoker-worker pipeline_bench transport_bench scaling_bench recovery_bench
          control_plane_bench client_test worker_pipeline_test"
cmake --build build-bundle -j "$(nproc)" --target $BINARIES
rm -rf .bundle && mkdir -p .bundle/bin .bundle/lib
for b in $BINARIES; do
  cp "build-bundle/bin/$b" .bundle/bin/
  strip --strip-debug ".bundle/bin/$b"
done
# Every shared library the binaries load, except the C/C++ runtime the GPU machine's own (newer) system provides.
ldd .bundle/bin/* | awk '/=> \// {print $3}' | sort -u | \
  grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' | \
  while read -r lib; do cp -L "$lib" .bundle/lib/; done
cp bench/gpu_machine.sh .bundle/
# The peers' benchmark scripts (../shared/bench), when this checkout has them beside it.
if [ -d ../shared/bench ]; then mkdir -p .bundle/peers && cp ../shared/bench/*.py .bundle/peers/; fi
du -sh .bundle
