"""Where a whole `fedcore run` round goes: local training, server step, evaluation, memorization, tracking.

Runs `python -m cProfile -m fedcore run CONFIG` (FedAvg on the preset, tracking as configured: the
default local MLflow store) for `--rounds` rounds in a fresh process and splits the profile by the
cumulative time of the functions that own each share. Shares overlap nowhere except as noted (the
evaluation's memorization part is inside the evaluation).

    python benchmarks/round_profile.py                         # MLP preset, 5 rounds, a table
    python benchmarks/round_profile.py --model cnn --rounds 2 -s train.local_epochs=1
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# share -> (file suffix, function name) whose cumulative time is that share
SHARES = {
    "local training (executor.run_clients)": [("engine/batched.py", "run_clients"),
                                              ("engine/executor.py", "run_clients")],
    "server update (method.server_update)": [("methods/base.py", "server_update")],
    "evaluation (Evaluator.__call__)": [("metrics/scoring.py", "__call__")],
    "  of which test forward + memorization forward (Evaluator.logits)": [("metrics/scoring.py", "logits")],
    "  of which macro P/R/F1 and confusion": [("metrics/classification.py", "macro_prf"),
                                              ("metrics/classification.py", "confusion")],
    "tracking and progress (callbacks after_round)": [("tracking/callback.py", "after_round"),
                                                      ("reporting/progress.py", "after_round")],
    "tracking run start and end (MLflow run, artifacts)": [("tracking/callback.py", "on_run_start"),
                                                            ("tracking/callback.py", "on_run_end")],
    "checkpoints (Checkpointer.save)": [("engine/checkpoint.py", "save")],
    "data load (load_or_build_data)": [("fedcore/run.py", "load_or_build_data")],
    "run_experiment (everything after imports)": [("fedcore/run.py", "run_experiment")],
}


def shares(prof: Path) -> dict[str, float]:
    stats = pstats.Stats(str(prof)).stats  # {(file, line, name): (cc, nc, tt, ct, callers)}
    out = {}
    for share, keys in SHARES.items():
        total = 0.0
        for suffix, name in keys:
            # the outermost entry of a recursive function counts once: cumulative time already includes it
            total += sum(v[3] for (f, _, n), v in stats.items() if n == name and f.endswith(suffix))
        out[share] = total
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/fmnist/fedsir_09.yaml")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--executor", default="batched")
    ap.add_argument("-s", "--set", action="append", default=[])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        prof = Path(tmp) / "run.prof"
        cmd = [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "fedcore", "run", str(REPO / args.config),
               "--out", str(Path(tmp) / "run"), "--no-progress", "-s", "method.name=fedavg", "-s", "method.params={}",
               "-s", f"model.name={args.model}", "-s", f"train.rounds={args.rounds}", "-s", "train.threads=1",
               "-s", f"train.executor={args.executor}", "-s", "train.device=cpu"]
        for s in args.set:
            cmd += ["-s", s]
        t = time.perf_counter()
        # cwd: the temporary folder (its MLflow store and run dir go with it); PYTHONPATH: this checkout's code
        subprocess.run(cmd, check=True, cwd=tmp, capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        wall = time.perf_counter() - t
        out = {"model": args.model, "rounds": args.rounds, "executor": args.executor, "wall_s": wall,
               "shares_s": shares(prof)}
    if args.json:
        print(json.dumps(out))
        return
    run = out["shares_s"]["run_experiment (everything after imports)"]
    print(f"# fedcore run, FedAvg {args.model}, {args.rounds} rounds, {args.executor}, one thread, under cProfile "
          f"(process wall {wall:.1f} s)")
    print("| share | s | s/round | of run_experiment |")
    print("|---|---|---|---|")
    for k, v in out["shares_s"].items():
        print(f"| {k} | {v:.2f} | {v / args.rounds:.3f} | {v / run:.0%} |")


if __name__ == "__main__":
    main()
