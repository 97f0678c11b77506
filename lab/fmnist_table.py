"""Fashion-MNIST tables for lab/results/*.md from the runs of the scripts' `fmnist` modes.

Usage: .venv/bin/python lab/fmnist_table.py runs/fmnist PRESET [PRESET ...]
One Markdown table per preset, one row per run folder (lab/fmnist_lib.sh), mean ± std
(the sample std, fedcore.stats.summary.mean_std) over the seeds found: last-10 and best-round
test accuracy, the best round, global memorization at the first and last evaluation,
identification F1 and the last relabel precision where the method logs them, and whether the row
beats FedAvg (its last-10 above FedAvg's best round on the same preset). The command behind each row follows the table.
A seed whose run stopped with "training diverged" (its <seed>.log beside the run folder, no
metrics.json) is named in its row's label, so a dropped seed never passes unnoticed.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

import numpy as np

from fedcore.stats.summary import mean_std

# Rows in this order first; anything else found (a method helper's rows) after them, by name.
ORDER = ["fedavg-clean", "fedavg", "fedprox", "symmetric_ce", "coteaching", "fednoro", "fedcorr", "dividemix",
         "fedsir", "fedsir-no_relabel", "fedsir-no_la", "fedsir-no_kd", "fedsir-no_daagg", "fedsir-principal_only",
         "fedsir-residual_only"]


def load(run: Path) -> dict:
    s = json.loads((run / "metrics.json").read_text())["summary"]
    rows = list(csv.DictReader((run / "history.csv").open()))
    mem = [float(r["train/memorization"]) for r in rows if r.get("train/memorization")]
    f1 = [float(r["detect/client_f1"]) for r in rows if r.get("detect/client_f1")]
    rp = [float(r["relabel/precision"]) for r in rows if r.get("relabel/precision")]
    return {"last10": s.get("final/acc_last10"), "best": s.get("final/acc_best"),
            "best_round": s.get("final/acc_best_round"), "mem_first": mem[0] if mem else None,
            "mem_last": mem[-1] if mem else None, "f1": f1[0] if f1 else None, "relabel_p": rp[-1] if rp else None}


def fmt(vals: list, scale: float = 100.0, digits: int = 1) -> str:
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    m, s = (x * scale for x in mean_std(vals))
    return f"{m:.{digits}f}" if len(vals) == 1 else f"{m:.{digits}f} ± {s:.{digits}f}"


def diverged(row: Path) -> list[str]:
    """'s2 diverged in round 35' for each seed of a row whose run the engine stopped as diverged."""
    out = []
    for log in sorted(row.glob("s*.log")):
        m = re.search(r"training diverged in round (\d+)", log.read_text(errors="replace"))
        if m and not (row / log.stem / "metrics.json").is_file():
            out.append(f"{log.stem} diverged in round {m.group(1)}")
    return out


def rows_of(root: Path, preset: str) -> dict[str, tuple[list[dict], list[str]]]:
    found = {d.name: ([load(r) for r in sorted(d.glob("s*")) if (r / "metrics.json").is_file()], diverged(d))
             for d in (root / preset).iterdir() if d.is_dir() and not d.name.startswith("data-")}
    names = [n for n in ORDER if any(found.get(n, ()))] + sorted(n for n in found if n not in ORDER and any(found[n]))
    return {n: found[n] for n in names}


def table(root: Path, preset: str) -> list[str]:
    rows = rows_of(root, preset)
    ref = rows.get("fedavg", ([], []))[0]
    ref_best = np.mean([r["best"] for r in ref]) if ref else None
    lines = [f"### {preset}", "", "| method (seeds) | acc last-10 | acc best | best round | memorized first → last "
             "| client F1 | relabel P | beats FedAvg |", "|---|---|---|---|---|---|---|---|"]
    for name, (runs, lost) in rows.items():
        def col(k, runs=runs):
            return [r[k] for r in runs]

        verdict = "-"
        if ref_best is not None and runs and name not in ("fedavg", "fedavg-clean"):
            d = 100 * (np.mean(col("last10")) - ref_best)
            verdict = f"{'yes' if d > 0 else 'no'} ({d:+.1f})"
        seeds = "; ".join([str(len(runs)), *lost])
        lines.append(f"| {name} ({seeds}) | {fmt(col('last10'))} | {fmt(col('best'))} "
                     f"| {fmt(col('best_round'), 1.0, 0)} | {fmt(col('mem_first'))} → {fmt(col('mem_last'))} "
                     f"| {fmt(col('f1'), 1.0, 2)} | {fmt(col('relabel_p'), 1.0, 2)} | {verdict} |")
    lines += ["", "Commands (seeds 0-2; `lab/fmnist_lib.sh` prepares the data):", ""]
    for name in rows:
        cmd = root / preset / name / "command.txt"
        if cmd.is_file():
            lines.append(f"- {name}: `{cmd.read_text().strip()}`")
    return lines


def main(root: Path, presets: list[str]) -> None:
    for preset in presets:
        if not (root / preset).is_dir():
            print(f"\n### {preset}: no runs under {root / preset}")
            continue
        print()
        print("\n".join(table(root, preset)))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__.split("\n\n")[1])
    main(Path(sys.argv[1]), sys.argv[2:])
