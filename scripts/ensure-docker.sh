#!/usr/bin/env bash
# CI (and anyone on a Debian machine as root): make the container tests runnable.
# Installs Docker Engine (Debian's docker.io), debootstrap (the base image without a registry) and
# Chromium (the MLflow UI check) when missing, then starts dockerd in the background when no daemon
# answers. Prints one line saying what it did. Elsewhere it says what to install and exits 2.
set -euo pipefail
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v chromium >/dev/null || need+=(chromium)
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "error: the container tests need ${need[*]}; install them (Debian: apt-get install ${need[*]})" >&2
    exit 2
  fi
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] || { echo "error: no Docker daemon answers; start Docker (systemctl start docker)" >&2; exit 2; }
  nohup dockerd >/tmp/dockerd.log 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "error: dockerd did not start; see /tmp/dockerd.log" >&2; exit 1; }
  echo "docker: started dockerd ($(docker version -f '{{.Server.Version}}'))${need[*]:+, installed ${need[*]}}"
else
  echo "docker: daemon running ($(docker version -f '{{.Server.Version}}'))${need[*]:+, installed ${need[*]}}"
fi
