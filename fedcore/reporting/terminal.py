"""The sweep's comparison table as a terminal shows it (`make run`, `fedcore pipeline run`).

One line per row within 100 columns, method names in full: test accuracy in % (last-10, best round,
the round validation picks), how much of the noise the global model memorized, and the verdict
against FedAvg. The per-method detection and relabeling columns (noise-rate Pearson, client and
sample F1, relabel precision) are blank for most methods, so they live where a table may be wide:
the `fedcore report` page (report.md) and the sweep's compare.md.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from fedcore.reporting.compare import fedavg_margin, group_records
from fedcore.stats.summary import mean_std

# (summary key with {m} for acc or mAP, header); a column shows when some run logged it.
COLUMNS = (("final/{m}_last10", "last-10"), ("final/{m}_best", "best"), ("final/{m}_best_round", "round"),
           ("final/{m}_at_val_best", "val-pick"), ("last/train/memorization", "memorized"))
LEGEND = ("best, round: the best round, picked on test (an oracle); val-pick: test {m} at the round the "
          "validation split picks; memorized: noisy samples fitted; vs FedAvg: last-10 minus FedAvg's best "
          "round, in points")


def _metric(records: list[dict[str, Any]]) -> str:
    return "acc" if any("final/acc_last10" in r["summary"] for r in records) else "mAP"


def _cell(values: list[Any], rounds: bool) -> str:
    m, s = mean_std(values)
    if m != m:  # NaN: nothing logged
        return "-"
    if rounds:
        return f"{m:.0f}"
    return f"{100 * m:.1f}" if len([v for v in values if v is not None]) <= 1 else f"{100 * m:.1f}±{100 * s:.1f}"


def terminal_rows(records: list[dict[str, Any]], by: str = "group") -> tuple[list[str], list[list[str]]]:
    """Header and rows of the terminal table (see the module docstring); values in %."""
    m = _metric(records)
    groups = group_records(records, by)
    present = [(k.format(m=m), h) for k, h in COLUMNS if any(k.format(m=m) in r["summary"] for r in records)]
    many = len({len(recs) for recs in groups.values()}) > 1  # else the title says how many seeds
    header = ["method · setting", *(["seeds"] if many else []), *(h for _, h in present)]
    rows = []
    for g, recs in groups.items():
        cells = [g, *([str(len(recs))] if many else [])]
        cells += [_cell([r["summary"].get(k) for r in recs], k.endswith("_best_round")) for k, _ in present]
        rows.append(cells)
    margins = [fedavg_margin(recs, records) for recs in groups.values()]
    if any(d is not None for d in margins):
        header.append("vs FedAvg")
        for row, d in zip(rows, margins, strict=True):
            row.append("-" if d is None else f"{'yes' if d > 0 else 'no'} {100 * d:+.1f}")
    return header, rows


def terminal_table(records: list[dict[str, Any]], by: str = "group", title: str = "comparison") -> Table:
    """The rows of `terminal_rows` as a rich Table; the label column never wraps or truncates."""
    header, rows = terminal_rows(records, by)
    seeds = {len(recs) for recs in group_records(records, by).values()}
    over = "one seed" if seeds == {1} else f"mean±std over {seeds.pop()} seeds" if len(seeds) == 1 \
        else "mean±std over seeds"
    table = Table(title=f"{title}: test {_metric(records)} in % ({over})", box=box.SIMPLE_HEAD, show_edge=False,
                  caption=LEGEND.format(m=_metric(records)), caption_justify="left")
    for i, h in enumerate(header):
        if i == 0:
            table.add_column(h, no_wrap=True, min_width=max(len(r[0]) for r in rows) if rows else None)
        else:
            table.add_column(h, justify="right")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))  # labels hold [key=value]: text, not rich markup
    return table
