#!/usr/bin/env bash
# Build a Debian 12 base image from Debian's archive, for machines that reach no container registry.
#   scripts/debian-base.sh [TAG]          (default fedcore-local/debian:12)
# The same release, variant (minbase) and apt sources as debian:12-slim, so the project Dockerfile
# builds on it unchanged (`make image BASE=local`). Needs root (debootstrap) and a running Docker.
# Prints the tag as its last line; reuses the image when the tag already exists.
set -euo pipefail
TAG="${1:-fedcore-local/debian:12}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"

if docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "$TAG"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "error: building the Debian base needs root (debootstrap); run 'sudo make image BASE=local'," \
       "or pull the pinned base on a machine that reaches Docker Hub" >&2
  exit 2
fi
if ! command -v debootstrap >/dev/null; then
  echo "installing debootstrap (apt-get)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
ROOTFS="$(mktemp -d /tmp/fedcore-rootfs.XXXXXX)"
trap 'rm -rf "$ROOTFS"' EXIT
echo "debootstrap: Debian 12 (bookworm, minbase) from $MIRROR, about a minute" >&2
debootstrap --variant=minbase bookworm "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 \
  || { echo "error: debootstrap failed; see $ROOTFS.log" >&2; trap - EXIT; exit 1; }
rm -f "$ROOTFS.log"
# debian:12-slim's sources (deb822), its updates and security suites included.
rm -f "$ROOTFS/etc/apt/sources.list"
cat > "$ROOTFS/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
# Like the slim image: no package lists, caches or docs in the layer.
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/var/cache/apt/archives/*.deb \
       "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/*
tar -C "$ROOTFS" --numeric-owner -c . \
  | docker import --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --message "debootstrap bookworm minbase" - "$TAG" >/dev/null
echo "$TAG"
