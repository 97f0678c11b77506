#!/usr/bin/env bash
# The GPU check (benchmarks/gpu_check.py): batched vs sequential for the MLP, the CNN and a CIFAR-shaped
# ResNet-18 with bf16 autocast off and on, then a short Fashion-MNIST FedAvg run; one JSON line on stdout.
#   bash benchmarks/gpu_check.sh                          # on a GPU machine, from the repository root
#   bash benchmarks/gpu_check.sh --device cpu --tiny      # the CPU smoke run (tests/test_gpu_check.py)
# Stops after GPU_CHECK_TIMEOUT seconds (default 300: the check is sized to finish well inside it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
test -x "$PY" || PY=python3
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >&2 || true
fi
exec timeout "${GPU_CHECK_TIMEOUT:-300}" "$PY" benchmarks/gpu_check.py "$@"
