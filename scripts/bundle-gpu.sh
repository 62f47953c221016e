#!/usr/bin/env bash
# Builds the binaries the GPU machine runs (it has none of our Debian libraries and no network) and gathers them
# with the shared libraries they load into .bundle/ (ignored by git), for the device tool's `carry`.
# OpenCV imgcodecs is left out: it drags in GDAL (~190 MB); the bundled worker decodes JPEG only.
#   scripts/bundle-gpu.sh            then on the GPU machine: export LD_LIBRARY_PATH=$PWD/.bundle/lib
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# The binaries find the bundle's libraries by RPATH ($ORIGIN/../lib; DT_RPATH, which also serves the libraries those
# load): local mode starts the servers from a trainer whose environment must not name them (PyTorch keeps its own).
cmake -S . -B build-bundle -DCMAKE_BUILD_TYPE=Release -DSTOKER_WITH_IMGCODECS=OFF -DSTOKER_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 '-DCMAKE_BUILD_RPATH=$ORIGIN/../lib' \
  -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags > build-bundle.configure.log
BINARIES="stoker stoker-coordinator stoker-worker pipeline_bench cut_bench transport_bench scaling_bench recovery_bench seal_bench
          control_plane_bench client_test worker_pipeline_test gpu_feed_bench nccl_bench"
cmake --build build-bundle -j "$(nproc)" --target $BINARIES python_package
rm -rf .bundle && mkdir -p .bundle/bin .bundle/lib
for b in $BINARIES; do
  cp "build-bundle/bin/$b" .bundle/bin/
  strip --strip-debug ".bundle/bin/$b"
done
# Every shared library the binaries load, except the C/C++ runtime the GPU machine's own (newer) system provides.
python/vendor_libs.sh .bundle/lib .bundle/bin/*
# The Python package as the build made it: libstoker_c.so inside with the libraries it loads vendored next to it
# (the package preloads them), so the trainer needs no LD_LIBRARY_PATH and PyTorch keeps its own copies of all.
mkdir -p .bundle/python
cp -r build-bundle/python/stoker .bundle/python/
cp build-bundle/bin/libfake_nvml.so .bundle/bin/   # client_test's stand-in NVML (STOKER_TEST_FAKE_NVML)
strip --strip-debug .bundle/python/stoker/lib/libstoker_c.so
mkdir -p .bundle/examples .bundle/tests
cp examples/*.py .bundle/examples/
cp python/tests/*.py .bundle/tests/
cp bench/gpu_machine.sh bench/resnet_headline.py bench/thread_cpu.py bench/lightning_bench.py bench/scale_bench.py \
  bench/elastic_bench.py bench/local_mode_bench.py bench/hybrid_bench.py bench/gpu_decode_rate.py .bundle/
# An earlier build's client benchmarks and servers, for gpu_machine.sh's `before` section: STOKER_BUNDLE_BEFORE names
# its build directory (configured like build-bundle), built with those targets.
if [ -n "${STOKER_BUNDLE_BEFORE:-}" ]; then
  mkdir -p .bundle/old/bin
  for b in stoker stoker-coordinator stoker-worker transport_bench gpu_feed_bench; do
    cp "$STOKER_BUNDLE_BEFORE/bin/$b" .bundle/old/bin/
    strip --strip-debug ".bundle/old/bin/$b"
  done
  python/vendor_libs.sh .bundle/lib .bundle/old/bin/*
fi
# The peers' benchmark scripts (../shared/bench), when this checkout has them beside it.
if [ -d ../shared/bench ]; then mkdir -p .bundle/peers && cp ../shared/bench/*.py .bundle/peers/; fi
du -sh .bundle
