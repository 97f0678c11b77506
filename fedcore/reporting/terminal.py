"""The comparison tables as a terminal shows them: the sweep's (`make run`, `fedcore pipeline run`)
and the full one of `fedcore run` and `fedcore compare` (`console_table`).

Accuracy and the other shares (F1, precision, memorization) are in % wherever a person reads them;
JSON, CSV and MLflow keep fractions, converted only here, at the print boundary.

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

from fedcore.reporting.compare import COLUMNS as SUMMARY_COLUMNS
from fedcore.reporting.compare import fedavg_margin, group_records
from fedcore.stats.summary import mean_std

# (summary key with {m} for acc or mAP, header); a column shows when some run logged it.
COLUMNS = (("final/{m}_last10", "last-10"), ("final/{m}_best", "best"), ("final/{m}_best_round", "round"),
           ("final/{m}_at_val_best", "val-pick"), ("last/train/memorization", "memorized"))
# What each column means, for the caption: only the columns the table shows (a legend of columns it
# does not show, val-pick without validation or vs FedAvg without FedAvg, reads as if they were missing).
LEGEND = {"best": "best, round: the best round, picked on test (an oracle)",
          "val-pick": "val-pick: test {m} at the round the validation split picks",
          "memorized": "memorized: noisy samples fitted",
          "vs FedAvg": "vs FedAvg: last-10 minus FedAvg's best round, in points"}


def legend(header: list[str], metric: str) -> str:
    """The caption: what the shown columns of `header` mean."""
    return "; ".join(LEGEND[h].format(m=metric) for h in header if h in LEGEND)


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
    return _with_margins(header, rows, groups, records, "vs FedAvg")


def _with_margins(header: list[str], rows: list[list[str]], groups: dict[str, list[dict[str, Any]]],
                  records: list[dict[str, Any]], column: str) -> tuple[list[str], list[list[str]]]:
    """The rows with a last column 'yes +d' / 'no -d' (`fedavg_margin`, in points), where any group has one."""
    margins = [fedavg_margin(recs, records) for recs in groups.values()]
    if any(d is not None for d in margins):
        header.append(column)
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
                  caption=legend(header, _metric(records)) or None, caption_justify="left")
    for i, h in enumerate(header):
        if i == 0:
            table.add_column(h, no_wrap=True, min_width=max(len(r[0]) for r in rows) if rows else None)
        else:
            table.add_column(h, justify="right")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))  # labels hold [key=value]: text, not rich markup
    return table


# Summary keys that are not shares of something, so never in %: a correlation, an NMI, a distance.
NOT_PERCENT = ("last/noise/rate_pearson", "last/detect/sample_label_nmi", "last/test/corr_dist")


def _console_cell(key: str, values: list[Any], seeds: int) -> str:
    m, s = mean_std(values)
    if m != m:  # NaN: nothing logged
        return "-"
    if key.endswith("_best_round"):
        return f"{m:.0f}"
    if key in NOT_PERCENT:
        return f"{m:.3f}" if seeds == 1 else f"{m:.3f} ± {s:.3f}"
    return f"{100 * m:.1f}" if seeds == 1 else f"{100 * m:.1f} ± {100 * s:.1f}"


def console_rows(records: list[dict[str, Any]], by: str = "method") -> tuple[list[str], list[list[str]]]:
    """Header and rows of `console_table`: one row per group, cells 'mean ± std' over its seeds
    (the value for one seed), shares in % and marked so in the header."""
    groups = group_records(records, by)
    present = [(k, name) for k, name in SUMMARY_COLUMNS if any(k in r["summary"] for r in records)]
    header = [by, "seeds", *(name if k in NOT_PERCENT or k.endswith("_best_round") else f"{name} %"
                             for k, name in present)]
    rows = [[g, str(len(recs)), *(_console_cell(k, [r["summary"].get(k) for r in recs], len(recs))
                                  for k, _ in present)] for g, recs in groups.items()]
    return _with_margins(header, rows, groups, records, "beats FedAvg (last10 − its best, points)")


def console_table(records: list[dict[str, Any]], by: str = "method", title: str = "comparison") -> Table:
    """`console_rows` as a rich Table (labels as text: they hold [key=value])."""
    header, rows = console_rows(records, by)
    table = Table(title=title)
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    return table
