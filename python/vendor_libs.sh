#!/usr/bin/env bash
# Copies the shared libraries that the given binaries load into DEST, except the C and C++ runtime every Linux
# provides (and whose newer system copies must win): what the Python package (stoker/lib, which it preloads), the
# GPU bundle and images carry so that they run where our Debian libraries are not installed, with no
# LD_LIBRARY_PATH.
#   python/vendor_libs.sh DEST FILE...
set -euo pipefail
dest=$1
shift
mkdir -p "$dest"
ldd "$@" | awk '/=> \// {print $3}' | sort -u | \
  grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' | \
  while read -r lib; do cp -L "$lib" "$dest/"; done
