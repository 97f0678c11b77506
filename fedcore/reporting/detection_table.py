"""The report page's detection and relabeling table: what each method says about the noise.

The terminal table of a sweep leaves these columns out (most methods log none of them, so they would
be a column of `-` per method on a 100-column screen); the report page has the room.
"""

from __future__ import annotations

import math
from typing import Any

from fedcore.stats.summary import mean_std

# (summary key, header, in %): the last round's value of each.
DETECTION_COLUMNS = (
    ("last/noise/rate_pearson", "noise-rate Pearson", False),
    ("last/detect/client_f1", "client F1", True),
    ("last/detect/sample_f1", "sample F1", True),
    ("last/detect/sample_label_nmi", "flags~label NMI", False),
    ("last/detect/sample_noise_nmi", "flags~noise NMI", False),
    ("last/relabel/precision", "relabel precision", True),
    ("last/train/memorization", "memorized", True),
)
# Memorization alone is no reason for the table: every run logs it.
_DETECTS = tuple(k for k, _, _ in DETECTION_COLUMNS if k != "last/train/memorization")


def detection_lines(groups: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Markdown lines of the table (heading, table, note), one row per group that logged a detection
    or relabeling metric, one column per metric some group logged; [] when none did."""
    rows = {g: recs for g, recs in groups.items() if any(k in r["summary"] for r in recs for k in _DETECTS)}
    if not rows:
        return []
    cols = [c for c in DETECTION_COLUMNS if any(c[0] in r["summary"] for recs in rows.values() for r in recs)]
    lines = ["", "## Detection and relabeling (last round)", "",
             "| group | " + " | ".join(h for _, h, _ in cols) + " |", "|---|" + "---|" * len(cols)]
    for g, recs in rows.items():
        lines.append(f"| {g} | " + " | ".join(_cell([r["summary"].get(k) for r in recs], pct) for k, _, pct in cols)
                     + " |")
    lines += ["", "F1, precision and memorized in %, mean ± sample std over seeds; `-`: the method does not "
              "log it. "
              "Memorized: the global model's share of noisy training samples predicted as their noisy label. "
              "A label NMI above the noise NMI: the detector's flags follow the given class, not the noise."]
    return lines


def _cell(values: list[Any], pct: bool) -> str:
    m, s = mean_std(values)
    if math.isnan(m):
        return "-"
    scale, digits = (100, 1) if pct else (1, 2)
    one = len([v for v in values if v is not None]) <= 1
    return f"{scale * m:.{digits}f}" if one else f"{scale * m:.{digits}f} ± {scale * s:.{digits}f}"
