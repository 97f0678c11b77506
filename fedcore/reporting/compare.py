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
    ("last/train/memorization", "memorized"), ("last/noise/rate_pearson", "rate r"),
    ("last/detect/client_f1", "client F1"), ("last/detect/sample_f1", "sample F1"),
    ("last/detect/sample_label_nmi", "flags~label NMI"),
    ("last/relabel/precision", "relabel P"),
    ("final/mAP_last10", "mAP last10"), ("last/test/CF1", "CF1"), ("last/test/OF1", "OF1"),
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
    """Header and rows: one row per group, cells 'mean ± std' (or the value for one seed)."""
    groups = group_records(records, by)
    present = [(k, name) for k, name in COLUMNS if any(k in r["summary"] for r in records)]
    header = [by, "seeds"] + [name for _, name in present]
    rows = []
    for g, recs in groups.items():
        cells = [g, str(len(recs))]
        for k, _ in present:
            m, s = mean_std([r["summary"].get(k) for r in recs])
            cells.append("-" if np.isnan(m) else (f"{m:.3f}" if len(recs) == 1 else f"{m:.3f} ± {s:.3f}"))
        rows.append(cells)
    return header, rows


def comparison_table(records: list[dict[str, Any]], by: str = "method", title: str = "comparison") -> Table:
    header, rows = comparison_rows(records, by)
    table = Table(title=title)
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    return table
