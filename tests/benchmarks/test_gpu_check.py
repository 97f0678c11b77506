"""benchmarks/gpu_check.sh's CPU smoke run: every path of the GPU check (both executors, bf16 autocast,
the FedAvg run) at tiny sizes, one JSON line out. No timing is checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_gpu_check_runs_on_the_cpu_and_prints_one_json_line():
    proc = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_check.sh"), "--device", "cpu", "--tiny", "--bf16-models", "mlp,cnn"],
        cwd=REPO, capture_output=True, text=True, env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin",
                                                       "OMP_NUM_THREADS": "1"}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stdout
    out = json.loads(lines[0])
    rows = {(r["model"], r["bf16"]): r for r in out["synthetic"]}
    assert set(rows) == {("mlp", False), ("mlp", True), ("cnn", False), ("cnn", True), ("resnet18_cifar", False)}
    for (_, bf16), r in rows.items():
        assert r["batched_s"] > 0 and r["sequential_s"] > 0
        if not bf16:  # float32: the two executors agree to rounding (the script itself stops above 1e-4)
            assert r["max_param_diff"] < 1e-4
    for key in ("fedavg", "fedavg_fused_adam"):
        assert out[key]["rounds"] == 1 and 0.0 <= out[key]["acc"] <= 1.0, out[key]
