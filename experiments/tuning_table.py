"""Tables of docs/results/tuning.md from the runs of experiments/tuning.sh.

    python experiments/tuning_table.py OUT SCENE...
    python experiments/tuning_table.py --summary OUT SCENE...   (one table: methods x scenes)
    python experiments/tuning_table.py --figure PNG OUT SCENE... (default and tuned bars per scene)

One table per scene: per method, the default and the tuned setting on the reporting seeds (last-10
test accuracy and the test accuracy at the round validation picks, mean +- std), the trials the tune
spent, and two verdicts for the tuned row, each on every seed: above FedAvg's test-best round (an oracle
no user has) and above FedAvg stopped early on validation (acc_at_val_best). FedAvg's reference is, per
seed and per criterion, the better of its default and tuned rows. A seed that diverged or whose model
predicts one class is named in the row. A multi-label scene's runs carry mAP instead of accuracy
(`final/mAP_last10`, ...); the table reads whichever the scene's FedAvg runs report.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def load(run: Path) -> dict | None:
    try:
        summary = json.loads((run / "metrics.json").read_text())["summary"]
    except (OSError, ValueError, KeyError):
        return None
    conf = run / "confusion.json"
    if conf.is_file():
        cols = [sum(col) for col in zip(*json.loads(conf.read_text()), strict=True)]
        summary["one_class"] = sum(1 for c in cols if c) == 1
    return summary


def seeds_of(row: Path) -> dict[int, dict]:
    out = {}
    for run in sorted(row.glob("s*")):
        if run.is_dir() and run.name[1:].isdigit() and (s := load(run)) is not None:
            out[int(run.name[1:])] = s
    return out


def notes(row: Path, seeds: dict[int, dict]) -> list[str]:
    found = [f"s{s} one class" for s, m in seeds.items() if m.get("one_class")]
    for log in sorted(row.glob("s*.log")):
        if "training diverged" in log.read_text(errors="replace"):
            found.append(f"{log.stem} diverged")
    return found


def fmt(vals: list[float]) -> str:
    if not vals:
        return "-"
    mean = 100 * statistics.fmean(vals)
    return f"{mean:.1f} ± {100 * statistics.stdev(vals):.1f}" if len(vals) > 1 else f"{mean:.1f}"


def col(seeds: dict[int, dict], key: str) -> list[float]:
    return [m[key] for m in seeds.values() if m.get(key) is not None]


def verdict(mine: dict[int, dict], ref: dict[int, float], key: str) -> str:
    common = sorted(set(mine) & set(ref))
    if not common:
        return "-"
    wins = [mine[s][key] > ref[s] for s in common if mine[s].get(key) is not None]
    margin = min(mine[s][key] - ref[s] for s in common)
    return f"{'✓' if all(wins) and len(wins) == len(common) else '✗'} ({100 * margin:+.1f})"


def metric_of(scene: Path) -> str:
    """'mAP' where the scene's runs report it (a multi-label scene), else 'acc'."""
    for run in sorted(scene.glob("*/*/s*")):
        if (m := load(run)) is not None:
            return "mAP" if "final/mAP_last10" in m else "acc"
    return "acc"


def reference(scene: Path, metric: str = "acc") -> tuple[dict[int, float], dict[int, float]]:
    """FedAvg per seed: the better test-best round and the better acc_at_val_best of its two rows."""
    rows = [seeds_of(scene / "fedavg" / r) for r in ("default", "tuned")]
    best, val = {}, {}
    for rs in rows:
        for s, m in rs.items():
            best[s] = max(best.get(s, 0.0), m[f"final/{metric}_best"])
            val[s] = max(val.get(s, 0.0), m.get(f"final/{metric}_at_val_best", 0.0))
    return best, val


def tune_info(tune: Path) -> str:
    try:
        t = json.loads((tune / "tune.json").read_text())
    except (OSError, ValueError):
        return "-"
    return f"{t['n_trials']} ({t['n_pruned']} pruned, {t.get('n_diverged', 0)} diverged)"


def ranking(means: dict[str, dict[str, float]]) -> str:
    """What tuning changed in the order: the rows by mean last-10, default setting then tuned,
    over the rows that have both."""
    both = sorted(set(means["default"]) & set(means["tuned"]))
    if not both:
        return "Ranking: no row has both settings yet."

    def order(which: str) -> str:
        rows = sorted(both, key=lambda m: -means[which][m])
        return " > ".join(f"{m} {100 * means[which][m]:.1f}" for m in rows)

    return f"Ranking by mean last-10, default: {order('default')}. Tuned: {order('tuned')}."


def table(out: Path, scene: str) -> str:
    root = out / scene
    metric = metric_of(root)
    last10, at_val = f"final/{metric}_last10", f"final/{metric}_at_val_best"
    best, val = reference(root, metric)
    lines = [f"### {scene}" + (f" ({metric})" if metric != "acc" else ""), "",
             f"| method | trials | default last-10 | default {metric}@val | tuned last-10 | tuned {metric}@val "
             f"| tuned > FedAvg test-best | tuned > FedAvg {metric}@val | seeds, notes |",
             "|---|---|---|---|---|---|---|---|---|"]
    means: dict[str, dict[str, float]] = {"default": {}, "tuned": {}}
    for mdir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("data")):
        d, t = seeds_of(mdir / "default"), seeds_of(mdir / "tuned")
        if not d and not t:
            continue
        for name, rows in (("default", d), ("tuned", t)):
            if vals := col(rows, last10):
                means[name][mdir.name] = statistics.fmean(vals)
        extra = notes(mdir / "default", d) + [f"tuned {n}" for n in notes(mdir / "tuned", t)]
        # FedAvg is the reference itself: judging it against the better of its own rows says nothing.
        v_best, v_val = (("reference",) * 2 if mdir.name == "fedavg"
                         else (verdict(t, best, last10), verdict(t, val, last10)))
        lines.append(
            f"| {mdir.name} | {tune_info(mdir / 'tune')} | {fmt(col(d, last10))} "
            f"| {fmt(col(d, at_val))} | {fmt(col(t, last10))} "
            f"| {fmt(col(t, at_val))} | {v_best} "
            f"| {v_val} | {len(d)}/{len(t)}{'; ' + ', '.join(extra) if extra else ''} |")
    lines.append("")
    lines += [ranking(means), ""]
    lines.append(f"FedAvg reference per seed (better of default and tuned): test-best {fmt(list(best.values()))}, "
                 f"{metric}@val {fmt(list(val.values()))}.")
    return "\n".join(lines)


def summary(out: Path, scenes: list[str]) -> str:
    """Methods x scenes, at a glance: each tuned row's mean last-10, marked ✓ where it beats both
    FedAvg references (test-best round and stopped on validation) on every seed, else ✗; FedAvg's
    cell is its tuned mean. A row not run on a scene reads "not run"."""
    scenes = [s for s in scenes if (out / s).is_dir()]
    cells: dict[str, dict[str, str]] = {}
    titles = []
    for scene in scenes:
        root = out / scene
        metric = metric_of(root)
        titles.append(scene + (f" ({metric})" if metric != "acc" else ""))
        last10 = f"final/{metric}_last10"
        best, val = reference(root, metric)
        for mdir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("data")):
            t = seeds_of(mdir / "tuned")
            if not (vals := col(t, last10)):
                continue
            mean = f"{100 * statistics.fmean(vals):.1f}"
            if mdir.name == "fedavg":
                cells.setdefault(mdir.name, {})[scene] = f"{mean} (reference)"
                continue
            wins = verdict(t, best, last10).startswith("✓") and verdict(t, val, last10).startswith("✓")
            cells.setdefault(mdir.name, {})[scene] = f"{mean} {'✓' if wins else '✗'}"
    head = "| method (tuned, mean last-10) | " + " | ".join(titles) + " |"
    lines = [head, "|---" * (len(scenes) + 1) + "|"]
    order = sorted(cells, key=lambda m: (m != "fedavg", m))
    lines += [f"| {m} | " + " | ".join(cells[m].get(s, "not run") for s in scenes) + " |" for m in order]
    return "\n".join(lines)


def figure_data(out: Path, scenes: list[str]) -> tuple[dict, dict, str]:
    """(panels, refs, metric) for `plots.paired_bars_figure`, in percent: per scene and row, the default
    and tuned last-10 (mean, std); the refs are FedAvg's mean test-best round and stopped-on-validation."""
    panels: dict[str, dict] = {}
    refs: dict[str, dict[str, float]] = {}
    metrics = set()
    for name in (s for s in scenes if (out / s).is_dir()):
        root = out / name
        metric = metric_of(root)
        metrics.add(metric)
        scene = name + (f" ({metric})" if metric != "acc" else "")  # a panel names its metric when not acc
        last10 = f"final/{metric}_last10"
        rows: dict[str, dict[str, tuple[float, float]]] = {}
        for mdir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("data")):
            for setting in ("default", "tuned"):
                if vals := col(seeds_of(mdir / setting), last10):
                    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
                    rows.setdefault(mdir.name, {})[setting] = (100 * statistics.fmean(vals), 100 * sd)
        best, val = reference(root, metric)
        panels[scene] = rows
        if best:
            refs[scene] = {"FedAvg test-best": 100 * statistics.fmean(best.values()),
                           "FedAvg at val-best": 100 * statistics.fmean(val.values())}
    return panels, refs, "/".join(sorted(metrics, key=lambda m: m != "acc")) or "acc"


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--summary":
        print(summary(Path(argv[1]), argv[2:]))
        return
    if argv and argv[0] == "--figure":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from fedcore.reporting.plots import paired_bars_figure, save

        panels, refs, metric = figure_data(Path(argv[2]), argv[3:])
        if not panels:
            raise SystemExit(f"tuning_table: no scene of {' '.join(argv[3:])} under {argv[2]}")
        save(paired_bars_figure(panels, refs, xlabel=f"last-10 test {metric} (%)"), argv[1])
        print(f"wrote {argv[1]}")
        return
    out = Path(argv[0])
    for scene in argv[1:]:
        if (out / scene).is_dir():
            print(table(out, scene))
            print()


if __name__ == "__main__":
    main(sys.argv[1:])
