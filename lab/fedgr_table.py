"""Tables for lab/results/notes/fedgr.md from the run dirs written by lab/fedgr.sh.

Usage: .venv/bin/python lab/fedgr_table.py OUT_DIR [variant ...]
Reads OUT_DIR/<preset>/<row>/s<seed>/{metrics.json,history.csv} for the presets fedgr_sym,
fedgr_mixed, fedgr_sym_cnn, digits_sym and digits_mixed (those present). Columns, mean ± std
(the sample std, fedcore.stats.summary.mean_std) over the seeds found: last-10 and best-round
test accuracy and their gap (how far the model decays from its peak); r_k Pearson (mean over the
rounds after FedGR's warm-up, i.e. those that log refine/*, else over every round that estimates)
and at the last round; r_k MAE and sample F1 at the last round; the last round's share of
samples in FedGR's pseudo-label tier, share of flagged samples with a confident pseudo-label
and cache coverage; the global model's memorization of the noisy labels at the last round and
its maximum; the local models' memorization of their own noisy labels (mean over rounds).
The seeds column lists the seeds found and names any seed the engine stopped as diverged.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np

from fedcore.stats.summary import mean_std

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling script, also when imported by file
from fmnist_table import diverged  # noqa: E402

ORDER = ["fedavg", "fedprox", "symmetric_ce", "coteaching", "fednoro", "fedcorr", "dividemix", "fedgr", "fedgr-robust",
         "fedgr-no_fs",
         "fedgr-no_lr", "fedgr-no_b", "fedgr-no_r", "fedgr-classwise", "fedgr-v1", "fedgr-text", "fedgr-probe",
         # the B audit (mixed, seed 0): teacher = w^t, the authors' optimizer, plain views, weighted B
         "fedgr-teacher_global", "fedavg-sgd_authors", "fedgr-sgd_authors", "fedgr-plain", "fedgr-plain-no_b",
         "fedgr-b_weighted", "fedgr-plain-b01"]
PRESETS = ["fedgr_sym", "fedgr_mixed", "fedgr_sym_cnn", "digits_sym", "digits_mixed"]
COLUMNS = [("acc", "acc last-10 (%)", 100, 1), ("best", "best round (%)", 100, 1),
           ("decay", "best minus last-10 (points)", 100, 1),
           ("pearson_after", "r_k Pearson after warm-up", 1, 2), ("pearson", "r_k Pearson last", 1, 2),
           ("mae", "r_k MAE last", 1, 3), ("f1", "sample F1 last", 1, 2), ("tier_high", "tier-3 share", 1, 2),
           ("confident", "confident share", 1, 2), ("coverage", "cache coverage", 1, 2),
           ("mem", "global mem. last (%)", 100, 1), ("mem_max", "global mem. max (%)", 100, 1),
           ("local_mem", "local mem. (%)", 100, 1)]


def _col(rows: list[dict], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key) not in (None, "") and np.isfinite(float(r[key]))]


def load(run: Path) -> dict:
    summary = json.loads((run / "metrics.json").read_text())["summary"]
    rows = list(csv.DictReader((run / "history.csv").open()))
    after = [r for r in rows if r.get("refine/tier_high_share") not in (None, "")] or rows
    last = {key: (vals[-1] if vals else None) for key, vals in (
        (k, _col(rows, k)) for k in ("noise/rate_pearson", "noise/rate_mae", "detect/sample_f1",
                                     "refine/tier_high_share", "refine/confident_share", "refine/cache_coverage",
                                     "train/memorization"))}
    pearson_after, mem, local = _col(after, "noise/rate_pearson"), _col(rows, "train/memorization"), \
        _col(rows, "train/local_memorization")
    return {"acc": summary["final/acc_last10"], "best": summary["final/acc_best"],
            "decay": summary["final/acc_best"] - summary["final/acc_last10"],  # the peak-then-decay premise
            "pearson_after": float(np.mean(pearson_after)) if pearson_after else None,
            "pearson": last["noise/rate_pearson"], "mae": last["noise/rate_mae"], "f1": last["detect/sample_f1"],
            "tier_high": last["refine/tier_high_share"], "confident": last["refine/confident_share"],
            "coverage": last["refine/cache_coverage"], "mem": last["train/memorization"],
            "mem_max": max(mem) if mem else None, "local_mem": float(np.mean(local)) if local else None}


def fmt(vals: list, scale: float = 100.0, digits: int = 1) -> str:
    vals = [v for v in vals if v is not None and np.isfinite(v)]
    if not vals:
        return "-"
    m, s = mean_std(vals)
    return f"{m * scale:.{digits}f} ± {s * scale:.{digits}f}"


def table(root: Path, preset: str, names: list[str]) -> list[str]:
    lines = ["| method | " + " | ".join(c[1] for c in COLUMNS) + " | seeds |",
             "|---|" + "---|" * (len(COLUMNS) + 1)]
    for name in names:
        found = sorted((root / preset / name).glob("s*/metrics.json"))
        if not found:
            continue
        runs = [load(p.parent) for p in found]
        cells = [fmt([r[key] for r in runs], scale, digits) for key, _, scale, digits in COLUMNS]
        seeds = "; ".join([",".join(p.parent.name[1:] for p in found), *diverged(root / preset / name)])
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {seeds} |")
    return lines


def main(argv: list[str]) -> None:
    root = Path(argv[0])
    names = ORDER + [n for n in argv[1:] if n not in ORDER]
    for preset in PRESETS:
        if (root / preset).is_dir():
            print(f"\n### {preset}\n")
            print("\n".join(table(root, preset, names)))


if __name__ == "__main__":
    main(sys.argv[1:])
