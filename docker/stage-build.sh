#!/usr/bin/env bash
# Lays out what the images take from one build of stoker, so that every image copies the same tree whether its
# binaries were compiled inside the image (docker/Dockerfile's binaries-source stage, docker/trainer-cuda.Dockerfile)
# or outside it (STOKER_BINARIES=prebuilt: a Debian 12 build made on the host, as CI does with the build it tests).
#   docker/stage-build.sh [--bundle-libs] BUILD_DIR DEST
# What `cmake --install BUILD_DIR --prefix DEST` lays out (cmake/StokerInstall.cmake):
# DEST/bin             stoker, stoker-coordinator, stoker-worker (debug info stripped, as are the libraries)
# DEST/include/stoker  the public headers
# DEST/lib             libstoker.so (the C++ API) and libstoker_c.so (the C ABI); lib/cmake/stoker, the CMake package
#                      for find_package(stoker), and lib/pkgconfig/stoker.pc; relocatable, so DEST may be copied
# and what the install does not give, which the images need:
# DEST/python/stoker   the Python package with its lib/libstoker_c.so and the libraries that loads (python/)
# DEST/build-info      the build's settings an image depends on (build type, CUDA, imgcodecs), for the record
# --bundle-libs copies the shared libraries `stoker`, libstoker.so and libstoker_c.so load, except the C and C++
# runtime, next to them (DEST/lib, DEST/python/stoker/lib): for a runtime image that is not Debian 12 (the CUDA
# trainer's is Ubuntu).
set -euo pipefail
bundle=0
if [ "${1:-}" = "--bundle-libs" ]; then bundle=1; shift; fi
[ $# -eq 2 ] || { echo "usage: docker/stage-build.sh [--bundle-libs] BUILD_DIR DEST" >&2; exit 2; }
build=$1
dest=$2

cmake --install "$build" --prefix "$dest" > /dev/null
mkdir -p "$dest/python"
rm -rf "$dest/python/stoker"
cp -r "$build/python/stoker" "$dest/python/"
find "$dest/python" -name __pycache__ -prune -exec rm -rf {} +
# Only regular files: strip would turn libstoker.so's links into copies.
find "$dest/bin" "$dest/lib" -maxdepth 1 -type f -exec strip --strip-debug {} +
strip --strip-debug "$dest/python/stoker/lib/libstoker_c.so"
grep -E '^(CMAKE_BUILD_TYPE|STOKER_WITH_CUDA|STOKER_WITH_IMGCODECS):' "$build/CMakeCache.txt" > "$dest/build-info"

if [ "$bundle" = 1 ]; then
  runtime='/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so'
  bundle_into() {  # the libraries $1 loads, bar the C and C++ runtime, copied into $2
    ldd "$1" | awk '/=> \// {print $3}' | { grep -vE "$runtime" || true; } | xargs -r -I{} cp -L {} "$2/"
  }
  bundle_into "$dest/bin/stoker" "$dest/lib"
  bundle_into "$dest/lib/libstoker.so" "$dest/lib"
  bundle_into "$dest/python/stoker/lib/libstoker_c.so" "$dest/python/stoker/lib"
fi
echo "stage-build: $(du -sh "$dest" | cut -f1) in $dest ($(tr '\n' ' ' < "$dest/build-info"))"
