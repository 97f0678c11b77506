#!/usr/bin/env bash
# Make the offline datasets the configs/fmnist/ presets read available: Debian's
# dataset-fashion-mnist package (the four official *-ubyte.gz files, flat, under
# /usr/share/datasets/fashion-mnist, where the fashion_mnist loader looks when data.root
# holds no copy).
#
#   files present      -> nothing to do, silent;
#   missing, root      -> apt-get install -y dataset-fashion-mnist (apt-get update first if the
#                         package lists do not offer it yet);
#   missing, not root  -> one line saying what to run.
# It never fails `make test` / `make run`: no test and not the quickstart read these files
# (loader tests write tiny official-format fixtures), so a machine without the package still
# tests the whole project; only `fedcore run configs/fmnist/...` needs it, and the loader's
# own error names the package then.
#
# Overrides (for tests): FMNIST_DIR (the folder to check), APT_GET (the apt-get to call),
# ENSURE_UID (the user id to act as).
set -uo pipefail

DIR="${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}"
APT_GET="${APT_GET:-apt-get}"
UID_NOW="${ENSURE_UID:-$(id -u)}"
PKG=dataset-fashion-mnist
FILES=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)

present() {
    local f
    for f in "${FILES[@]}"; do [[ -f "$DIR/$f.gz" ]] || return 1; done
}

present && exit 0

if [[ "$UID_NOW" != 0 ]]; then
    echo "ensure-datasets: Fashion-MNIST is not in $DIR; the configs/fmnist presets need it:" \
        "run 'sudo apt-get install -y $PKG' (or set data.root to a folder with the official files)" >&2
    exit 0
fi
if ! command -v "$APT_GET" >/dev/null; then
    echo "ensure-datasets: no apt-get here; put the official Fashion-MNIST *-ubyte.gz files in a folder" \
        "and set data.root for the configs/fmnist presets" >&2
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
if ! "$APT_GET" install -y -qq "$PKG" >/dev/null 2>&1; then
    # A fresh machine may have no package lists yet.
    "$APT_GET" update -qq >/dev/null 2>&1 || true
    "$APT_GET" install -y -qq "$PKG" >/dev/null 2>&1 || true
fi
if present; then
    echo "ensure-datasets: installed $PKG ($DIR)"
else
    echo "ensure-datasets: 'apt-get install -y $PKG' did not provide $DIR/*-ubyte.gz; the configs/fmnist" \
        "presets need those files (or data.root pointing at a copy)" >&2
fi
exit 0
