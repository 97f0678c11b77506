"""Compare finished runs: a table of final metrics, grouped into mean ± std over seeds."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from fedcore.errors import ArtifactError

COLUMNS = [
    ("final/acc_last10", "acc last10"), ("final/acc", "acc final"), ("final/acc_best", "acc best"),
    ("final/acc_best_round", "best round"),
    ("last/train/memorization", "memorized"), ("last/noise/rate_pearson", "rate r"),
    ("last/detect/client_f1", "client F1"), ("last/detect/sample_f1", "sample F1"),
    ("last/detect/sample_label_nmi", "flags~label NMI"),
    ("last/relabel/precision", "relabel P"),
    ("final/mAP_last10", "mAP last10"), ("final/mAP_best", "mAP best"), ("final/mAP_best_round", "best round"),
    ("last/test/CF1", "CF1"), ("last/test/OF1", "OF1"),
    ("last/test/corr_dist", "corr dist"),
]


def load_run(path: Path) -> dict[str, Any]:
    f = Path(path) / "metrics.json"
    if not f.is_file():
        raise ArtifactError(f"'{path}' has no metrics.json; pass run dirs written by `fedcore run`")
    try:
        rec = json.loads(f.read_text())
        summary = rec["summary"]
        # Valid JSON of the wrong shape (a list, a null summary, text values) is corrupt too.
        if not isinstance(summary, dict) or not all(isinstance(v, int | float | None) for v in summary.values()):
            raise TypeError
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ArtifactError(f"'{f}' is corrupt; re-run the experiment") from None
    rec["path"] = str(path)
    return rec


def group_records(records: list[dict[str, Any]], by: str = "method") -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[str(r.get(by, r.get("path")))].append(r)
    return dict(groups)


def mean_std(values: list[float]) -> tuple[float, float]:
    vals = np.array([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if not len(vals):
        return float("nan"), float("nan")
    return float(vals.mean()), float(vals.std(ddof=0))


def comparison_rows(records: list[dict[str, Any]], by: str = "method") -> tuple[list[str], list[list[str]]]:
    """Header and rows: one row per group, cells 'mean ± std' (or the value for one seed).

    With FedAvg runs of the same setting among the records, a last column says whether each
    group beats FedAvg: its mean last-10 above FedAvg's mean best round (so above its last-10 too).
    """
    groups = group_records(records, by)
    present = [(k, name) for k, name in COLUMNS if any(k in r["summary"] for r in records)]
    header = [by, "seeds"] + [name for _, name in present]
    rows = []
    for g, recs in groups.items():
        cells = [g, str(len(recs))]
        for k, _ in present:
            m, s = mean_std([r["summary"].get(k) for r in recs])
            rounds = k.endswith("_best_round")
            cells.append("-" if np.isnan(m) else (f"{m:.{0 if rounds else 3}f}" if len(recs) == 1 or rounds
                                                  else f"{m:.3f} ± {s:.3f}"))
        rows.append(cells)
    verdicts = [beats_fedavg(recs, records) for recs in groups.values()]
    if any(v != "-" for v in verdicts):
        header.append("beats FedAvg (last10 − its best)")
        for row, v in zip(rows, verdicts, strict=True):
            row.append(v)
    return header, rows


def beats_fedavg(group: list[dict[str, Any]], records: list[dict[str, Any]]) -> str:
    """'yes +d' / 'no -d': d = the group's mean last-10 minus the mean best round of FedAvg on the
    same setting; '-' for FedAvg itself or when no FedAvg run of that setting is in the records."""
    settings = {r.get("setting") for r in group}
    if len(settings) != 1 or any(r.get("method") in (None, "fedavg") for r in group):
        return "-"
    setting = settings.pop()
    ref = [r for r in records if r.get("method") == "fedavg" and r.get("setting") == setting]
    short = "acc" if any("final/acc_last10" in r["summary"] for r in group) else "mAP"
    mine, _ = mean_std([r["summary"].get(f"final/{short}_last10") for r in group])
    best, _ = mean_std([r["summary"].get(f"final/{short}_best") for r in ref])
    if not ref or np.isnan(mine) or np.isnan(best):
        return "-"
    return f"{'yes' if mine > best else 'no'} {mine - best:+.3f}"


def comparison_table(records: list[dict[str, Any]], by: str = "method", title: str = "comparison") -> Table:
    header, rows = comparison_rows(records, by)
    table = Table(title=title)
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    return table
