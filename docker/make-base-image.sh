#!/usr/bin/env bash
# Makes the base image the Dockerfiles start FROM, debian:bookworm-slim, with Debian's own tools, for an engine that
# cannot pull from a registry (CI, this devbox): debootstrap a minbase Debian 12 from the mirror apt already uses,
# trim it the way the official slim image is trimmed, and `docker import` it.
#   docker/make-base-image.sh [TAG]        (default debian:bookworm-slim; needs root, debootstrap and a docker engine)
# DOCKER (default /usr/bin/docker, Debian's docker.io) and DOCKER_HOST pick the engine; STOKER_DEBIAN_MIRROR
# overrides the mirror. Where a registry is reachable, `docker pull debian:bookworm-slim` does the same job.
set -euo pipefail
TAG=${1:-debian:bookworm-slim}
DOCKER=${DOCKER:-/usr/bin/docker}

# The mirror apt uses: the first Debian URI in the deb822 sources (Debian 12's layout) or in sources.list.
mirror=${STOKER_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(grep -hoE '^URIs:\s*\S+/debian/?(\s|$)' /etc/apt/sources.list.d/*.sources 2>/dev/null \
           | awk '{print $2}' | head -n1 || true)
fi
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list)
fi
if [ -z "$mirror" ]; then
  echo "make-base-image: no Debian mirror in apt's sources; set STOKER_DEBIAN_MIRROR" >&2
  exit 1
fi

root=$(mktemp -d "${TMPDIR:-/tmp}/stoker-rootfs.XXXXXX")
trap 'rm -rf "$root" "$root.log"' EXIT
echo "make-base-image: debootstrap --variant=minbase bookworm from $mirror"
if ! debootstrap --variant=minbase bookworm "$root" "$mirror" > "$root.log" 2>&1; then
  tail -n 30 "$root.log"
  rm -f "$root.log"
  exit 1
fi
rm -f "$root.log"

# Inside, apt must reach the same archives as the host (bookworm, -updates, -security): its sources, nothing else.
rm -f "$root/etc/apt/sources.list"
for f in /etc/apt/sources.list /etc/apt/sources.list.d/debian.sources; do
  [ -f "$f" ] && cp "$f" "$root$f"
done

# debootstrap installs bookworm as it is on the mirror; the security and -updates archives' fixes come next, as in
# the official image (no /proc is needed: nothing that debootstrap installed has a maintainer script that reads it).
chroot "$root" apt-get update -q > /dev/null
if ! DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get -y -q upgrade > "$root.log" 2>&1; then
  tail -n 30 "$root.log"
  rm -f "$root.log"
  exit 1
fi
echo "make-base-image: $(grep -E '^[0-9]+ upgraded' "$root.log") (bookworm-updates, bookworm-security)"
rm -f "$root.log"

# As in the official slim image: no documentation, manuals or translations from any package installed later, and
# apt keeps no package cache (image layers would carry it).
cat > "$root/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
cat > "$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
find "$root/usr/share/doc" -mindepth 2 -not -name copyright -not -type d -delete
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$root"/usr/share/{man,groff,info,lintian,linda}/* "$root"/var/log/* "$root"/dev/* "$root"/tmp/*
# apt's lists and caches emptied, their directories kept: apt's download sandbox (user _apt) needs them as they are.
find "$root/var/lib/apt/lists" "$root/var/cache/apt" -type f -delete
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +

tar -C "$root" --numeric-owner -c . | "$DOCKER" import \
  --change 'CMD ["bash"]' \
  --message "debootstrap --variant=minbase bookworm $mirror (docker/make-base-image.sh)" - "$TAG" > /dev/null
echo "make-base-image: $TAG, $("$DOCKER" image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1 / 1e6}')"
