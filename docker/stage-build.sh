#!/usr/bin/env bash
# Lays out what the images take from one build of stoker, so that every image copies the same tree whether its
# binaries were compiled inside the image (docker/Dockerfile's binaries-source stage, docker/trainer-cuda.Dockerfile)
# or outside it (STOKER_BINARIES=prebuilt: a Debian 12 build made on the host, as CI does with the build it tests).
#   docker/stage-build.sh [--bundle-libs] BUILD_DIR DEST
# DEST/bin             stoker, stoker-coordinator, stoker-worker (debug info stripped)
# DEST/lib             the client's static libraries: libclient.a (libclient_cuda.a where built), the layers'
#                      (libbase.a, libdataset.a, libwire.a, libauth.a) and libschema.a
# DEST/include         their headers: stoker/*.h, stoker/schema/*.capnp.h, base/ dataset/ wire/ auth/*.h
# DEST/python/stoker   the Python package with its lib/libstoker_c.so
# DEST/build-info      the build's settings an image depends on (build type, CUDA, imgcodecs), for the record
# --bundle-libs copies the shared libraries `stoker` and libstoker_c.so load, except the C and C++ runtime, next to
# them (DEST/lib, DEST/python/stoker/lib): for a runtime image that is not Debian 12 (the CUDA trainer's is Ubuntu).
set -euo pipefail
bundle=0
if [ "${1:-}" = "--bundle-libs" ]; then bundle=1; shift; fi
[ $# -eq 2 ] || { echo "usage: docker/stage-build.sh [--bundle-libs] BUILD_DIR DEST" >&2; exit 2; }
src=$(cd "$(dirname "$0")/.." && pwd)
build=$1
dest=$2

mkdir -p "$dest/bin" "$dest/lib" "$dest/include/stoker/schema" "$dest/python"
for b in stoker stoker-coordinator stoker-worker; do
  install -m 755 "$build/bin/$b" "$dest/bin/$b"
done
for a in client/libclient.a base/libbase.a dataset/libdataset.a wire/libwire.a auth/libauth.a schema/libschema.a; do
  install -m 644 "$build/$a" "$dest/lib/"
done
if [ -f "$build/client/libclient_cuda.a" ]; then install -m 644 "$build/client/libclient_cuda.a" "$dest/lib/"; fi
install -m 644 "$src"/include/stoker/*.h "$dest/include/stoker/"
for layer in base dataset wire auth; do
  mkdir -p "$dest/include/$layer"
  install -m 644 "$src/$layer"/*.h "$dest/include/$layer/"
done
install -m 644 "$build"/schema/stoker/schema/*.capnp.h "$dest/include/stoker/schema/"
rm -rf "$dest/python/stoker"
cp -r "$build/python/stoker" "$dest/python/"
find "$dest/python" -name __pycache__ -prune -exec rm -rf {} +
strip --strip-debug "$dest"/bin/* "$dest"/lib/*.a "$dest/python/stoker/lib/libstoker_c.so"
grep -E '^(CMAKE_BUILD_TYPE|STOKER_WITH_CUDA|STOKER_WITH_IMGCODECS):' "$build/CMakeCache.txt" > "$dest/build-info"

if [ "$bundle" = 1 ]; then
  runtime='/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so'
  bundle_into() {  # the libraries $1 loads, bar the C and C++ runtime, copied into $2
    ldd "$1" | awk '/=> \// {print $3}' | { grep -vE "$runtime" || true; } | xargs -r -I{} cp -L {} "$2/"
  }
  bundle_into "$dest/bin/stoker" "$dest/lib"
  bundle_into "$dest/python/stoker/lib/libstoker_c.so" "$dest/python/stoker/lib"
fi
echo "stage-build: $(du -sh "$dest" | cut -f1) in $dest ($(tr '\n' ' ' < "$dest/build-info"))"
