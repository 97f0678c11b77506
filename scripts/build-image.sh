#!/usr/bin/env bash
# `make image`: build the project image from ./Dockerfile; its last line is `image: NAME:TAG`.
#   IMAGE=NAME:TAG   the tag to build (default: the image pipeline tasks run, fedcore.deploy.env)
#   BASE=pinned      the Dockerfile's digest-pinned Debian 12 base; when it cannot be pulled, an
#                    equivalent base is built with debootstrap first (scripts/debian-base.sh)
#   BASE=local       that debootstrap base straight away (machines without a registry)
#   BASE=REF         any other base reference
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="${IMAGE:-ghcr.io/fedcore/fedcore:0.1.0}"
BASE="${BASE:-pinned}"
PINNED="$(sed -n 's/^ARG BASE=//p' Dockerfile)"

if ! command -v docker >/dev/null || ! docker info >/dev/null 2>&1; then
  echo "error: no running Docker daemon; install Docker (Debian: apt-get install docker.io) and start it" \
       "(systemctl start docker, or dockerd &), then rerun make image" >&2
  exit 2
fi
case "$BASE" in
  pinned)
    if docker image inspect "$PINNED" >/dev/null 2>&1 || docker pull -q "$PINNED" >/dev/null 2>&1; then
      BASE="$PINNED"
    else
      echo "cannot pull $PINNED (no registry reachable?); building an equivalent Debian 12 base instead" >&2
      BASE="$(bash scripts/debian-base.sh)"
    fi ;;
  local) BASE="$(bash scripts/debian-base.sh)" ;;
esac
# The CA bundle this machine's pip trusts, for the build's pip (networks that re-sign TLS); none: pip's own.
# It goes into the tracked folder docker/build-ca/ as ca.pem, an optional build input (docker/build-ca/README.md).
CA="${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}"
CA="${CA:-${REQUESTS_CA_BUNDLE:-${SSL_CERT_FILE:-}}}"
if [ -n "$CA" ] && [ -s "$CA" ]; then
  cp "$CA" docker/build-ca/ca.pem.tmp && mv docker/build-ca/ca.pem.tmp docker/build-ca/ca.pem
else
  rm -f docker/build-ca/ca.pem
fi
COMMIT="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
echo "building $IMAGE on $BASE (first build: downloads torch's CUDA wheels, several GB)" >&2
docker build --build-arg BASE="$BASE" --build-arg GIT_COMMIT="$COMMIT" -t "$IMAGE" . >&2
SIZE="$(docker image inspect -f '{{.Size}}' "$IMAGE")"
echo "size: $((SIZE / 1000000)) MB ($IMAGE, base $BASE)"
echo "image: $IMAGE"
