"""`fedcore report`: a results page (report.md plus PNGs) from finished run dirs.

Runs are grouped as `fedcore compare` groups them (method, then the config keys that keep settings
apart; seeds of one setting together). The page holds:

- accuracy.png: test accuracy (mAP on multi-label runs) per round per group: the mean over seeds with a
  min-max band, FedAvg's best round as a dashed line, the warm-up's end and stage changes marked;
- noise_rates.png: estimated against true noise rate per client at the last round, with Pearson in
  the title, for each group whose method estimates rates;
- detection.png: client-identification and sample-detection P/R/F1 per round, where logged;
- memorization.png: the global and local memorization of noisy labels per round (the premise);
- a table: mean ± std of last-10, best round and acc_at_val_best, and whether each group's last-10
  beats FedAvg's best round on every seed (FedAvg of the same data setting and seed);
- a table of the detection and relabeling metrics at the last round, for the groups that log them.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedcore.errors import ArtifactError, UserError
from fedcore.io import atomic_write_bytes
from fedcore.metrics.noise import rate_pearson_mae
from fedcore.reporting import compare, plots
from fedcore.reporting.compare import budget_notes, budget_of, group_key, group_records, load_run
from fedcore.reporting.compare_mlflow import load_records as mlflow_records
from fedcore.reporting.detection_table import detection_lines
from fedcore.stats.summary import mean_std
from fedcore.tracking.mlflow import resolve_uri

SETTING_PREFIXES = ("data.", "partition.", "noise.")
DETECTION = ("detect/client_precision", "detect/client_recall", "detect/client_f1",
             "detect/sample_precision", "detect/sample_recall", "detect/sample_f1")
MEMORIZATION = ("train/memorization", "train/local_memorization")


RATE_PREFIX = "noise/rate_est/client_"


def read_history(path: Path) -> list[dict[str, Any]]:
    """A run's history.csv as rows of floats (stage kept as text; an empty cell is absent)."""
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"'{path.parent}' has no history.csv; pass run dirs written by `fedcore run`")
    rows = []
    with path.open(newline="") as f:
        for raw in csv.DictReader(f):
            row: dict[str, Any] = {}
            for k, v in raw.items():
                if k == "stage":
                    row[k] = v
                elif v not in ("", None):
                    try:
                        row[k] = float(v)
                    except ValueError:
                        raise ArtifactError(f"'{path}' is corrupt ({k}={v!r}); re-run the experiment") from None
            rows.append(row)
    return rows


def rate_series(history: list[dict[str, Any]]) -> dict[int, list[tuple[float, float]]]:
    """Per client, every (round, estimated noise rate) the run logged, in round order."""
    out: dict[int, list[tuple[float, float]]] = {}
    for row in history:
        for k, v in row.items():
            if k.startswith(RATE_PREFIX):
                out.setdefault(int(k[len(RATE_PREFIX):]), []).append((row["round"], v))
    return out


def run_figures(run_dir: str | Path, title: str, fed: Any = None) -> dict[str, Any]:
    """The figures a tracked run logs under figures/: its curves and, when the method estimated noise
    rates and `fed` (its FederatedDataset) holds the truth, those estimates against it.

    {artifact path: matplotlib Figure}; empty when the run dir has no history.csv.
    """
    path = Path(run_dir) / "history.csv"
    if not path.is_file():
        return {}
    history = read_history(path)
    task = fed.task if fed is not None else "single"
    figures = {"figures/curves.png": plots.curves_figure(history, title, task=task)}
    series = rate_series(history)
    if series and fed is not None:
        true = {c: float(fed.truth.realized_rate[c]) for c in series}
        figures["figures/noise_rates.png"] = plots.rate_trajectories(series, true, title)
    return figures


def seed_band(histories: Sequence[Sequence[dict[str, Any]]], key: str):
    """(rounds, mean, min, max) of `key` over the seeds' histories, at every round where at least
    one seed has a finite value (the mean and range are over the seeds that have it); None if none."""
    by_round: dict[float, list[float]] = {}
    for hist in histories:
        for row in hist:
            v = row.get(key)
            if isinstance(v, float) and math.isfinite(v):
                by_round.setdefault(row["round"], []).append(v)
    if not by_round:
        return None
    rounds = sorted(by_round)
    vals = [by_round[r] for r in rounds]
    return rounds, [float(np.mean(v)) for v in vals], [min(v) for v in vals], [max(v) for v in vals]


def setting_of(record: dict[str, Any]) -> tuple:
    """What the data setting of a run is: its data, partition and noise config (seed apart)."""
    cfg = record.get("config") or {}
    return tuple(sorted((k, v) for k, v in cfg.items() if k.startswith(SETTING_PREFIXES) and k != "data.seed"))


def fedavg_reference(records: list[dict[str, Any]], short: str) -> dict[tuple, float]:
    """(setting, seed) -> FedAvg's best round; where several FedAvg configs ran (the preset's and
    a tuned one), the better of them on that seed, so that no method is judged against the weaker."""
    ref: dict[tuple, float] = {}
    for r in records:
        best = r["summary"].get(f"final/{short}_best") if r.get("method") == "fedavg" else None
        if best is not None and not math.isnan(best):
            key = (setting_of(r), r.get("seed"))
            ref[key] = max(ref.get(key, -math.inf), best)
    return ref


def reference_line(records: list[dict[str, Any]], short: str) -> list[float]:
    """FedAvg's best round per seed for the plot's one line: on the setting most of the other runs
    share (a sweep's clean FedAvg reference is not the bar of its noisy runs)."""
    ref = fedavg_reference(records, short)
    others = Counter(setting_of(r) for r in records if r.get("method") != "fedavg")
    setting = others.most_common(1)[0][0] if others else None
    return [v for (s, _), v in ref.items() if setting is None or s == setting]


def beats_fedavg_every_seed(group: list[dict[str, Any]], records: list[dict[str, Any]], short: str) -> str:
    """'✓ (+m)' when the group's last-10 is above FedAvg's best round (`fedavg_reference`) on every
    seed they share, m the smallest margin (points); '✗ (m)' otherwise; '-' for FedAvg or without a
    FedAvg run to match."""
    if any(r.get("method") == "fedavg" for r in group):
        return "-"
    ref = fedavg_reference(records, short)
    margins = []
    for r in group:
        best = ref.get((setting_of(r), r.get("seed")))
        mine = r["summary"].get(f"final/{short}_last10")
        if best is not None and mine is not None:
            margins.append(mine - best)
    if not margins:
        return "-"
    return f"{'✓' if len(margins) == len(group) and min(margins) > 0 else '✗'} ({100 * min(margins):+.1f})"


def load_records(run_dirs: Sequence[str | Path]) -> list[dict[str, Any]]:
    if not run_dirs:
        raise UserError("no run dirs given: pass the folders `fedcore run` wrote (each holds metrics.json)")
    records = []
    for d in run_dirs:
        rec = load_run(Path(d))
        rec["history"] = read_history(Path(d) / "history.csv")
        records.append(rec)
    names = sorted({str((r.get("config") or {}).get("data.name", "?")) for r in records})
    if len(names) > 1:
        raise UserError(f"the runs are on different datasets ({', '.join(names)}); report one dataset at a time")
    return records


def marks_of(groups: dict[str, list[dict[str, Any]]]) -> list[tuple[float, str]]:
    """Vertical marks: the warm-up's end (train.warmup_rounds) and every stage change, from each
    group's first run (one mark per round and label)."""
    per_group: dict[str, list[tuple[float, str]]] = {}
    for g, recs in groups.items():
        first, mine = recs[0], []
        warm = float((first.get("config") or {}).get("train.warmup_rounds", 0) or 0)
        if warm:
            mine.append((warm + 0.5, "warm-up"))
        hist = first["history"]
        for prev, row in zip(hist, hist[1:], strict=False):
            if prev.get("stage") != row.get("stage"):
                mine.append((row["round"] - 0.5, str(row.get("stage"))))
        if mine:
            per_group[g] = mine
    # With marks from several methods, each label says whose stage it is: the method's, as stages are a
    # method's, so the groups of one method (its default and tuned settings) share their marks.
    method = {g: str(groups[g][0].get("method", g)) for g in per_group}
    named = len(set(method.values())) > 1
    marks = {(rnd, f"{method[g]}: {text}" if named else text): None
             for g, mine in per_group.items() for rnd, text in mine}
    return list(marks)


def last_rates(record: dict[str, Any]) -> tuple[list[float], list[float]] | None:
    """(true, estimated) per-client noise rate at the last round that logged estimates, or None."""
    series = rate_series(record["history"])
    scene = Path(record["path"]) / "scene.json"
    if not series or not scene.is_file():
        return None
    truth = {c["client"]: c["realized_rate"] for c in json.loads(scene.read_text())["clients"]}
    est = {c: pts[-1][1] for c, pts in series.items()}
    cids = [c for c in sorted(est) if truth.get(c) is not None]
    return [truth[c] for c in cids], [est[c] for c in cids]


def write_report(run_dirs: Sequence[str | Path], out: str | Path, labels: Mapping[str, str] | None = None) -> Path:
    """report.md and its figures under `out`; returns the report's path. labels: run dir -> its group's
    name (a bench names its rows 'ROW (default)' and 'ROW (tuned)', where config keys would make long,
    unreadable labels); without them runs group as `fedcore compare` groups them."""
    records = load_records(run_dirs)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    named = {str(Path(d)): label for d, label in (labels or {}).items()}  # "runs/a/" and "runs/a" alike
    for r in records if labels else ():
        r["label"] = named.get(str(Path(r["path"])), str(r.get("method")))
    groups = group_records(records, by="label" if labels else "method")
    colors = plots.group_colors(list(groups))  # one colour per group in every figure
    multi = all("final/mAP_last10" in r["summary"] and "final/acc_last10" not in r["summary"] for r in records)
    short = "mAP" if multi else "acc"
    figures: list[tuple[str, str]] = []
    bands = {g: b for g, recs in groups.items() if (b := seed_band([r["history"] for r in recs], f"test/{short}"))}
    fedavg = reference_line(records, short)
    ref, _ = mean_std(fedavg)
    several = len({group_key(r.get("config") or {}) for r in records if r.get("method") == "fedavg"}) > 1
    plots.save(plots.band_figure(bands, f"test {short}", f"test {short} per round (mean over seeds, min-max band)",
                                 ref=ref if fedavg else None,
                                 ref_label=f"FedAvg's best round (mean{', better config per seed' if several else ''})",
                                 marks=marks_of(groups), colors=colors), out / "accuracy.png")
    figures.append(("accuracy.png", f"Test {short} per round"))
    rated = {g: rates for g, recs in groups.items() if (rates := last_rates(recs[0]))}
    if rated:
        g, (true, est) = next(iter(rated.items()))
        pearson = rate_pearson_mae(est, true)["pearson"]  # the Pearson the run logged, with its guards
        plots.save(plots.rate_scatter(true, est, title=f"{g}: last-round estimates, Pearson {pearson:.2f}"),
                   out / "noise_rates.png")
        figures.append(("noise_rates.png", f"Estimated against true noise rate ({g}, seed {groups[g][0].get('seed')})"))
    for name, keys, title in (("detection.png", DETECTION, "client identification and sample detection"),
                              ("memorization.png", MEMORIZATION, "memorization of noisy labels (the premise)")):
        panels = {k: bs for k in keys if (bs := {g: b for g, recs in groups.items()
                                                 if (b := seed_band([r["history"] for r in recs], k))})}
        if panels:
            plots.save(plots.panels_figure(panels, title, cols=3 if len(panels) > 2 else len(panels), colors=colors),
                       out / name)
            figures.append((name, title[0].upper() + title[1:]))
    text = page(groups, records, short, figures)
    atomic_write_bytes(out / "report.md", text.encode())
    return out / "report.md"


def page(groups: dict[str, list[dict[str, Any]]], records: list[dict[str, Any]], short: str,
         figures: list[tuple[str, str]]) -> str:
    def cell(key: str, recs: list[dict[str, Any]]) -> str:
        m, s = mean_std([r["summary"].get(key) for r in recs])
        return "-" if math.isnan(m) else (f"{100 * m:.1f}" if len(recs) == 1 else f"{100 * m:.1f} ± {100 * s:.1f}")

    dataset = (records[0].get("config") or {}).get("data.name", "?")
    # The score a choice on validation reads (fedcore bench's), shown where the runs have a validation split.
    val_key = f"final/val_{short}_last10"
    has_val = any(r["summary"].get(val_key) is not None for r in records)
    val_head = f"val {short} last-10 | " if has_val else ""
    lines = [f"# fedcore report: {dataset}", "", f"{len(records)} runs in {len(groups)} groups.", "",
             f"| group | seeds | budget | {val_head}{short} last-10 | {short} best round | {short} at val-best | "
             "last-10 > FedAvg's best round, every seed |", "|---" * (7 + has_val) + "|"]
    for g, recs in groups.items():
        seeds = ", ".join(str(r.get("seed")) for r in recs)
        verdict = beats_fedavg_every_seed(recs, records, short)
        budget = " / ".join(sorted({budget_of(r) for r in recs}))
        extra = max(compare.extra_rounds(r) for r in recs)
        budget += f" (+{extra} in extra stages)" if extra else ""
        val = f"{cell(val_key, recs)} | " if has_val else ""
        lines.append(f"| {g} | {seeds} | {budget} | {val}{cell(f'final/{short}_last10', recs)} "
                     f"| {cell(f'final/{short}_best', recs)} | {cell(f'final/{short}_at_val_best', recs)} "
                     f"| {verdict} |")
    lines.append("")
    lines.append("Values in %, mean ± sample std (n − 1) over seeds. \"At val-best\": the test score at the "
                 "round the clients' held-out validation split picks (runs with `data.validation`), "
                 "\"val last-10\" that split's own score over the last 10 rounds; the best "
                 "round is picked on the test set, an oracle no user has. Budget: the training rounds every "
                 "method is given (`train.rounds`) and its local epochs; \"extra stages\": rounds a method adds "
                 "before training (FedSIR's identification, FedRG's pretraining), not counted in the budget.")
    lines += [f"\n**{note}**" for note in budget_notes(records)]
    lines += detection_lines(groups)
    for name, caption in figures:
        lines += ["", f"## {caption}", "", f"![{caption}]({name})"]
    return "\n".join(lines) + "\n"


def mlflow_runs(experiment: str, uri: str | None, cache: Path) -> list[Path]:
    """The finished fedcore runs of an MLflow experiment, as run-dir-shaped folders under `cache`
    (each run's logged metrics.json, history.csv, config.yaml and scene.json), so the page is made
    the same way from either source."""
    import mlflow  # lazy: MLflow takes seconds; for an MLflow read only

    records = mlflow_records(experiment, uri)
    if not records:
        raise UserError(f"MLflow experiment '{experiment}' has no finished fedcore runs yet")
    client = mlflow.MlflowClient(tracking_uri=resolve_uri(uri, Path.cwd())[0])
    dirs = []
    for rec in records:
        run = cache / rec["run_id"]
        run.mkdir(parents=True, exist_ok=True)
        for artifact in ("metrics.json", "history.csv", "config.yaml", "reports/scene.json"):
            try:
                got = Path(client.download_artifacts(rec["run_id"], artifact, str(run)))
            except Exception:  # an older run without that artifact: the page does without it
                continue
            if got.parent != run:
                got.replace(run / got.name)
        dirs.append(run)
    return dirs
