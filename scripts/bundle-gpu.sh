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
          control_plane_bench client_test worker_pipeline_test gpu_feed_bench nccl_bench"
cmake --build build-bundle -j "$(nproc)" --target $BINARIES python_package
rm -rf .bundle && mkdir -p .bundle/bin .bundle/lib
for b in $BINARIES; do
  cp "build-bundle/bin/$b" .bundle/bin/
  strip --strip-debug ".bundle/bin/$b"
done
# Every shared library the binaries load, except the C/C++ runtime the GPU machine's own (newer) system provides.
ldd .bundle/bin/* | awk '/=> \// {print $3}' | sort -u | \
  grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' | \
  while read -r lib; do cp -L "$lib" .bundle/lib/; done
# The Python package, its libstoker_c.so inside and the libraries that library loads vendored next to it (the
# package preloads them): the trainer needs no LD_LIBRARY_PATH, so PyTorch keeps its own copies of everything.
mkdir -p .bundle/python
cp -r build-bundle/python/stoker .bundle/python/
cp build-bundle/bin/libfake_nvml.so .bundle/bin/   # client_test's stand-in NVML (STOKER_TEST_FAKE_NVML)
strip --strip-debug .bundle/python/stoker/lib/libstoker_c.so
ldd .bundle/python/stoker/lib/libstoker_c.so | awk '/=> \// {print $3}' | sort -u | \
  grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' | \
  while read -r lib; do cp -L "$lib" .bundle/python/stoker/lib/; done
mkdir -p .bundle/examples .bundle/tests
cp examples/train_resnet50.py .bundle/examples/
cp python/tests/loader_test.py .bundle/tests/
cp bench/gpu_machine.sh bench/resnet_headline.py .bundle/
# The peers' benchmark scripts (../shared/bench), when this checkout has them beside it.
if [ -d ../shared/bench ]; then mkdir -p .bundle/peers && cp ../shared/bench/*.py .bundle/peers/; fi
du -sh .bundle
