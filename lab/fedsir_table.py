"""Tables for lab/results/notes/fedsir.md from the run dirs written by lab/fedsir.sh.

Usage: .venv/bin/python lab/fedsir_table.py runs/fedsir
Accuracy: last-10 test accuracy, mean ± std over seeds 0-2 (the sample std,
fedcore.stats.summary.mean_std). Identification and relabel numbers come from history.csv:
client F1 of the one identification round, relabel precision/recall at the first and the last
relabel event (mean over seeds).
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np

from fedcore.stats.summary import mean_std

ORDER = ["fedavg-noisefree", "fedavg", "fednoro", "fedcorr", "dividemix", "fedsir", "fedsir-no_relabel", "fedsir-no_la",
         "fedsir-no_kd", "fedsir-no_daagg", "fedsir-principal_only", "fedsir-residual_only"]


def load(run: Path) -> dict:
    summary = json.loads((run / "metrics.json").read_text())["summary"]
    rows = list(csv.DictReader((run / "history.csv").open()))
    f1 = [float(r["detect/client_f1"]) for r in rows if r.get("detect/client_f1")]
    events = [r for r in rows if r.get("relabel/precision")]
    out = {"acc": summary["final/acc_last10"], "f1": f1[0] if f1 else None}
    for k in ("precision", "recall", "damage", "changed"):
        vals = [float(e[f"relabel/{k}"]) for e in events]
        out[f"{k}_first"], out[f"{k}_last"] = (vals[0], vals[-1]) if vals else (None, None)
    return out


def fmt(vals: list, pct: bool = True, std: bool = True) -> str:
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    m, s = mean_std(vals)
    scale = 100 if pct else 1
    return f"{m * scale:.1f} ± {s * scale:.1f}" if std else f"{m:.3f}"


def method_table(root: Path, preset: str, seeds=(0, 1, 2)) -> list[str]:
    lines = ["| method | acc last-10 (%) | client F1 | relabel P first / last | relabel R first / last "
             "| damage last | changed last |", "|---|---|---|---|---|---|---|"]
    for name in ORDER:
        runs = [load(root / preset / name / f"s{s}") for s in seeds if (root / preset / name / f"s{s}" /
                                                                          "metrics.json").is_file()]
        if not runs:
            continue
        def col(k, runs=runs):
            return [r[k] for r in runs]

        pr = f"{fmt(col('precision_first'), std=False)} / {fmt(col('precision_last'), std=False)}"
        rr = f"{fmt(col('recall_first'), std=False)} / {fmt(col('recall_last'), std=False)}"
        lines.append(f"| {name} ({len(runs)}) | {fmt(col('acc'))} | {fmt(col('f1'), std=False)} | {pr} | {rr} "
                     f"| {fmt(col('damage_last'), std=False)} | {fmt(col('changed_last'), std=False)} |")
    return lines


def relabel_events(root: Path, preset: str, name: str = "fedsir", seeds=(0, 1, 2)) -> list[str]:
    """Relabel metrics at every event (train-stage round), mean over seeds."""
    per_seed = []
    for s in seeds:
        hist = root / preset / name / f"s{s}" / "history.csv"
        if hist.is_file():  # a seed still running or not run yet is left out, not a crash
            per_seed.append([r for r in csv.DictReader(hist.open()) if r.get("relabel/precision")])
    keys = ("precision", "recall", "damage", "changed", "agree_rate")
    lines = ["| round | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    # Seeds can relabel a different number of times; average the events they all reached.
    for i, ev in enumerate(per_seed[0][: min(map(len, per_seed))] if per_seed else []):
        vals = [np.mean([float(p[i][f"relabel/{k}"]) for p in per_seed]) for k in keys]
        lines.append(f"| {int(float(ev['round']))} | " + " | ".join(f"{v:.3f}" for v in vals) + " |")
    return lines


def identification(root: Path, preset: str, name: str = "fedsir", seeds=range(5)) -> str:
    f1 = {s: load(root / preset / name / f"s{s}")["f1"] for s in seeds
          if (root / preset / name / f"s{s}" / "metrics.json").is_file()}
    perfect = sum(v == 1.0 for v in f1.values())
    per_seed = ", ".join(f"s{s}: {v:.3f}" for s, v in f1.items())
    return f"{preset} / {name}: F1 = 1.0 on {perfect} of {len(f1)} seeds ({per_seed})"


def sweep(root: Path) -> list[str]:
    """Identification F1 per identify-stage setting (epochs, lr, min_class_n) and seed."""
    lines = ["| preset | E1 | lr | min_class_n | seeds with F1 = 1 | F1 per seed |", "|---|---|---|---|---|---|"]
    for preset in ("fedsir_digits", "fedsir_digits_06"):
        for d in sorted((root / preset).glob("e*"), key=lambda p: p.name):
            ep, lr, mn = d.name[1:].split("-lr")[0], *d.name.split("-lr")[1].split("-n")
            f1 = [load(r)["f1"] for r in sorted(d.glob("s*")) if (r / "metrics.json").is_file()]
            per = " ".join(f"{v:.2f}" for v in f1)
            lines.append(f"| {preset} | {ep} | {lr} | {mn} | {sum(v == 1.0 for v in f1)} / {len(f1)} | {per} |")
    return lines


def main(root: Path) -> None:
    for preset in ("fedsir_digits", "fedsir_digits_06"):
        if not (root / preset).is_dir():
            print(f"\n### {preset}: no runs under {root / preset}")
            continue
        print(f"\n### {preset}\n")
        print("\n".join(method_table(root, preset)))
        print()
        print(identification(root, preset))
        print(identification(root, preset, "fednoro", range(3)))
        print("\nFedSIR relabel events (mean of seeds 0-2):\n")
        print("\n".join(relabel_events(root, preset)))
    for mode in ("sweep", "holdout"):
        if (root / mode).is_dir():
            print(f"\n### identification, {mode}\n")
            print("\n".join(sweep(root / mode)))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/fedsir"))
