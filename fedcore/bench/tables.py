"""The tables of lab/results/tuning.md from bench.json, as pure functions of its scenes.

Per scene (`scene_table`): per method (the bench's choice in bold, with its chosen setting), the
default and the tuned setting over the reporting seeds (the validation score the choice reads, bold
where it chose; the last-10 test score; the test score at the round validation picks; mean ± sample
std in %), the trials its tune spent, and two verdicts for the tuned row, each on every seed: its
last-10 above FedAvg's test-best round (an oracle no user has), and its acc_at_val_best above
FedAvg's (both stopped early on validation: like with like). FedAvg's reference is, per seed and
per criterion, the better of its default and tuned rows. A verdict reads the seeds both sides
finished: a diverged seed drops out of it and is named in the row's notes, with the seed counts
(default/tuned). Under the table, the choice line says why the choice won, in %.

Across scenes (`summary_table`): each tuned row's mean last-10, ✓ where both verdicts hold. Per seed
(`seed_table`): FedAvg's two bars and every row's last-10 on each seed, the tuned cells marked on
that seed by the verdicts' two comparisons. A multi-label scene's rows hold mAP under the same field
names (the scene's `metric`); its titles say so. A scene written before its grid finished (`fedcore
bench --so-far`) holds `still_to_run`, and each of these tables says so in a line of its own.

These began as the rules the retired experiments/tuning_table.py applied to tuning.sh's run folders;
issue 71 added the validation columns and the choice line, and made the second verdict compare
acc@val with acc@val (it compared the tuned last-10 with FedAvg's acc@val).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fedcore.bench.choice import SCORE, among_of, choice_reason
from fedcore.errors import ConfigError
from fedcore.stats.summary import mean_std

REFERENCE = "fedavg"  # the method every verdict is against
Scene = Mapping[str, Any]  # bench.json's scenes.<name>: metric, rows, tuned


def seeds_of(scene: Scene, method: str, setting: str) -> dict[int, dict]:
    """seed -> row of a method's finished runs in one setting (a diverged run has no scores)."""
    return {r["seed"]: r for r in scene["rows"]
            if r["method"] == method and r["setting"] == setting and "diverged" not in r}


def col(seeds: Mapping[int, Mapping], key: str) -> list[float]:
    return [r[key] for _, r in sorted(seeds.items()) if r.get(key) is not None]


def fmt(vals: Sequence[float]) -> str:
    """'71.2 ± 3.4' in % (sample std), one value without the ±, '-' for none."""
    if not vals:
        return "-"
    mean, sd = mean_std(vals)
    return f"{100 * mean:.1f} ± {100 * sd:.1f}" if len(vals) > 1 else f"{100 * mean:.1f}"


# Which score of a tuned row each FedAvg bar is compared with: its last-10 with the oracle's best round,
# and its score at the round validation picks with FedAvg's, both stopped on validation.
AGAINST_BEST, AGAINST_VAL = "acc_last10", "acc_at_val_best"


def verdict(mine: Mapping[int, Mapping], ref: Mapping[int, float], key: str) -> str:
    """'✓ (+4.0)' when `mine[s][key]` beats `ref[s]` on every seed both have, else '✗ (...)'; the
    margin is the smallest over those seeds, in points; '-' without a common seed."""
    common = sorted(s for s in set(mine) & set(ref) if mine[s].get(key) is not None)
    if not common:
        return "-"
    margin = min(mine[s][key] - ref[s] for s in common)
    return f"{'✓' if all(mine[s][key] > ref[s] for s in common) else '✗'} ({100 * margin:+.1f})"


def reference(scene: Scene) -> tuple[dict[int, float], dict[int, float]]:
    """FedAvg per seed: the better test-best round and the better acc_at_val_best of its two rows."""
    best: dict[int, float] = {}
    val: dict[int, float] = {}
    for setting in ("default", "tuned"):
        for s, r in seeds_of(scene, REFERENCE, setting).items():
            if r.get("acc_best") is not None:
                best[s] = max(best.get(s, 0.0), r["acc_best"])
            val[s] = max(val.get(s, 0.0), r.get("acc_at_val_best") or 0.0)
    return best, val


def tune_info(tune: Mapping[str, Any] | None) -> str:
    """'8 (2 pruned, 0 diverged)': the trials a tune finished, '-' without one; ', kept the default' where a
    tune started at its default setting ended there (its tuned row is the default setting rerun)."""
    if not tune or tune.get("n_trials") is None:
        return "-"
    kept = ", kept the default" if tune.get("best_is_default") else ""
    return f"{tune['n_trials']} ({tune.get('n_pruned') or 0} pruned, {tune.get('n_diverged') or 0} diverged{kept})"


def notes(scene: Scene, method: str, setting: str) -> list[str]:
    """'s1 one class' (a model that predicts one class), then 's2 diverged', in seed order."""
    rows = sorted((r for r in scene["rows"] if r["method"] == method and r["setting"] == setting),
                  key=lambda r: r["seed"])
    return ([f"s{r['seed']} one class" for r in rows if r.get("one_class")]
            + [f"s{r['seed']} diverged" for r in rows if "diverged" in r])


def ranking(means: Mapping[str, Mapping[str, float]]) -> str:
    """What tuning changed in the order: the rows by mean last-10, default then tuned, over the
    rows that have both."""
    both = sorted(set(means["default"]) & set(means["tuned"]))
    if not both:
        return "Ranking: no row has both settings yet."

    def order(which: str) -> str:
        rows = sorted(both, key=lambda m: -means[which][m])
        return " > ".join(f"{m} {100 * means[which][m]:.1f}" for m in rows)

    return f"Ranking by mean last-10, default: {order('default')}. Tuned: {order('tuned')}."


def title(name: str, scene: Scene) -> str:
    return name + (f" ({scene['metric']})" if scene.get("metric", "acc") != "acc" else "")


def partial_note(name: str, scene: Scene) -> str | None:
    """The line that marks a scene whose grid had work left when its bench.json was written."""
    if not (left := scene.get("still_to_run")):
        return None
    return (f"Partial: {name} had {left['tune_trials']} tune trials and {left['runs']} runs still to run; "
            "its rows, verdicts and choice may change.")


def test_caveats(scene: Scene) -> list[str]:
    """A line per note of the data on its test split (bench.json's `test_notes`): a split held out of noisy labels
    makes every test column below a score against noisy labels, and the reader must know before reading one."""
    return [f"Caveat (the data): {note}; the test columns score those labels, the choice reads validation only."
            for note in scene.get("test_notes", [])]


def methods_of(scene: Scene) -> list[str]:
    return sorted({r["method"] for r in scene["rows"]})


def chosen_setting(scene: Scene) -> str | None:
    """The setting of the bench's choice (a record from before the choice read both settings chose a
    tuned row); None without a choice."""
    return None if scene.get("choice") is None else scene.get("choice_setting") or among_of(scene)[-1]


def chosen_cell(scene: Scene, method: str) -> str:
    """The method's cell, '**fedsir** (chosen, tuned)' for the bench's choice at its chosen setting."""
    if method != scene.get("choice"):
        return method
    return f"**{method}** (chosen, {chosen_setting(scene)})"


def val_cell(scene: Scene, method: str, setting: str, rows: Mapping[int, Mapping]) -> str:
    """The validation score the choice reads (mean over the seeds), bold where the choice fell."""
    text = fmt(col(rows, SCORE))
    chosen = method == scene.get("choice") and setting == chosen_setting(scene) and text != "-"
    return f"**{text}**" if chosen else text


def scene_table(name: str, scene: Scene) -> str:
    """The scene's section: heading, table, ranking line and FedAvg's reference line."""
    return f"### {title(name, scene)}\n\n{scene_body(scene, name)}"


def scene_body(scene: Scene, name: str) -> str:
    """The scene's table, ranking line and FedAvg's reference line (what a page prints under its own
    heading), after the partial note of a scene with work left and the data's caveats."""
    metric = scene.get("metric", "acc")
    best, val = reference(scene)
    lines = [f"{note}\n" for note in [partial_note(name, scene), *test_caveats(scene)] if note]
    lines += [f"| method | trials | default val last-10 | default last-10 | default {metric}@val | tuned val last-10 "
              f"| tuned last-10 | tuned {metric}@val | tuned last-10 > FedAvg test-best "
              f"| tuned {metric}@val > FedAvg {metric}@val | seeds, notes |",
              "|---" * 11 + "|"]
    means: dict[str, dict[str, float]] = {"default": {}, "tuned": {}}
    for m in methods_of(scene):
        d, t = seeds_of(scene, m, "default"), seeds_of(scene, m, "tuned")
        for setting, rows in (("default", d), ("tuned", t)):
            if vals := col(rows, "acc_last10"):
                means[setting][m] = statistics.fmean(vals)
        extra = notes(scene, m, "default") + [f"tuned {n}" for n in notes(scene, m, "tuned")]
        # FedAvg is the reference itself: judging it against the better of its own rows says nothing.
        v_best, v_val = (("reference",) * 2 if m == REFERENCE
                         else (verdict(t, best, AGAINST_BEST), verdict(t, val, AGAINST_VAL)))
        lines.append(
            f"| {chosen_cell(scene, m)} | {tune_info(scene.get('tuned', {}).get(m))} "
            f"| {val_cell(scene, m, 'default', d)} | {fmt(col(d, 'acc_last10'))} | {fmt(col(d, 'acc_at_val_best'))} "
            f"| {val_cell(scene, m, 'tuned', t)} | {fmt(col(t, 'acc_last10'))} | {fmt(col(t, 'acc_at_val_best'))} "
            f"| {v_best} | {v_val} | {len(d)}/{len(t)}{'; ' + ', '.join(extra) if extra else ''} |")
    lines += ["", ranking(means), "",
              f"FedAvg reference per seed (better of default and tuned): test-best {fmt(list(best.values()))}, "
              f"{metric}@val {fmt(list(val.values()))}."]
    if "choice" in scene:  # the reason for the bold row, as `fedcore bench` printed it
        lines += ["", f"Chosen on validation: {choice_reason(scene)}."]
    return "\n".join(lines)


def seed_table(scene: Scene, name: str) -> str:
    """Per seed: FedAvg's two bars, then each row's tuned and default last-10, a tuned cell marked ✓
    where, on that seed, its last-10 is above the test-best bar and its score at val-best above the
    {metric}@val bar (the verdict columns are these marks on every seed), ✗ where not; a diverged
    seed reads "diverged", one not run "-"."""
    metric = scene.get("metric", "acc")
    best, val = reference(scene)
    seeds = sorted({r["seed"] for r in scene["rows"]})

    def line(label: str, cells: Mapping[int, str], vals: Sequence[float]) -> str:
        return f"| {label} | " + " | ".join(cells.get(s, "-") for s in seeds) + f" | {fmt(vals)} |"

    lines = [f"{note}\n" for note in [partial_note(name, scene), *test_caveats(scene)] if note]
    lines += ["| row | " + " | ".join(f"seed {s}" for s in seeds) + " | mean ± std |", "|---" * (len(seeds) + 2) + "|",
              line("FedAvg test-best (bar)", {s: f"{100 * v:.1f}" for s, v in best.items()}, list(best.values())),
              line(f"FedAvg {metric}@val (bar)", {s: f"{100 * v:.1f}" for s, v in val.items()}, list(val.values()))]
    for m in methods_of(scene):
        for setting in ("tuned", "default"):
            diverged = [r["seed"] for r in scene["rows"]
                        if r["method"] == m and r["setting"] == setting and "diverged" in r]
            finished = seeds_of(scene, m, setting)
            if not (diverged or finished):
                continue
            cells = dict.fromkeys(diverged, "diverged")
            for s, r in finished.items():
                v = r["acc_last10"]
                at_val = r.get(AGAINST_VAL)
                wins = s in best and s in val and v > best[s] and at_val is not None and at_val > val[s]
                mark = "" if setting == "default" or m == REFERENCE or s not in best else (" ✓" if wins else " ✗")
                cells[s] = f"{100 * v:.1f}{mark}"
            lines.append(line(f"{m}, {setting}", cells, col(finished, "acc_last10")))
    return "\n".join(lines)


def summary_table(scenes: Mapping[str, Scene]) -> str:
    """Methods x scenes: each tuned row's mean last-10, ✓ where it beats both FedAvg references on
    every seed, else ✗; FedAvg's cell is its tuned mean. A row not run on a scene reads "not run"."""
    cells: dict[str, dict[str, str]] = {}
    for name, scene in scenes.items():
        best, val = reference(scene)
        for m in methods_of(scene):
            t = seeds_of(scene, m, "tuned")
            if not (vals := col(t, "acc_last10")):
                continue
            mean = f"{100 * statistics.fmean(vals):.1f}"
            if m == REFERENCE:
                cells.setdefault(m, {})[name] = f"{mean} (reference)"
                continue
            wins = verdict(t, best, AGAINST_BEST).startswith("✓") and verdict(t, val, AGAINST_VAL).startswith("✓")
            cells.setdefault(m, {})[name] = f"{mean} {'✓' if wins else '✗'}"
    head = "| method (tuned, mean last-10) | " + " | ".join(title(n, s) for n, s in scenes.items()) + " |"
    lines = [head, "|---" * (len(scenes) + 1) + "|"]
    order = sorted(cells, key=lambda m: (m != REFERENCE, m))
    lines += [f"| {m} | " + " | ".join(cells[m].get(n, "not run") for n in scenes) + " |" for m in order]
    notes = [n for name, scene in scenes.items() if (n := partial_note(name, scene))]
    return "\n".join(lines + (["", *notes] if notes else []))


def figure_data(scenes: Mapping[str, Scene]) -> tuple[dict, dict, str]:
    """(panels, refs, metric) for `plots.paired_bars_figure`, in %: per scene and row, the default and
    tuned last-10 (mean, std); the refs are FedAvg's mean test-best round and stopped-on-validation."""
    panels: dict[str, dict] = {}
    refs: dict[str, dict[str, float]] = {}
    for name, scene in scenes.items():
        rows: dict[str, dict[str, tuple[float, float]]] = {}
        for m in methods_of(scene):
            for setting in ("default", "tuned"):
                if vals := col(seeds_of(scene, m, setting), "acc_last10"):
                    mean, sd = mean_std(vals)
                    rows.setdefault(m, {})[setting] = (100 * mean, 100 * sd)
        panels[title(name, scene)] = rows
        best, val = reference(scene)
        if best:
            refs[title(name, scene)] = {"FedAvg test-best": 100 * statistics.fmean(best.values()),
                                        "FedAvg at val-best": 100 * statistics.fmean(val.values())}
    metrics = {s.get("metric", "acc") for s in scenes.values()}
    return panels, refs, "/".join(sorted(metrics, key=lambda m: m != "acc")) or "acc"


def read_bench(path: str | Path) -> tuple[Path, dict]:
    """(the file, its content) of a bench.json given as the file or a bench OUT dir holding one."""
    p = Path(path)
    f = p / "bench.json" if p.is_dir() else p
    try:
        data = json.loads(f.read_text())
        if not isinstance(data["scenes"], dict):
            raise TypeError
    except OSError:
        raise ConfigError(f"no bench results at '{f}'; pass a `fedcore bench` OUT dir or its bench.json (a bench "
                          "still running writes it at its end; `fedcore bench GRID --out OUT --so-far` "
                          "writes one from the runs finished so far)") from None
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"'{f}' is not a bench.json (no scenes); pass what `fedcore bench` wrote") from None
    return f, data


def load_scenes(paths: Iterable[str | Path]) -> dict[str, dict]:
    """The scenes of one or more bench.json (a file, or a bench OUT dir holding one), in the order
    given; a scene named in two of them is refused (which one would the table show?)."""
    scenes: dict[str, dict] = {}
    for p in paths:
        for name, scene in read_bench(p)[1]["scenes"].items():
            if name in scenes:
                raise ConfigError(f"scene '{name}' is in two of the bench results given; pass each scene once")
            scenes[name] = scene
    return scenes


def scene_tables(scenes: Mapping[str, Scene], only: Sequence[str] = ()) -> dict[str, Scene]:
    """The scenes named in `only` (all when empty), in that order; an unknown name is refused."""
    if not only:
        return dict(scenes)
    if missing := [s for s in only if s not in scenes]:
        raise ConfigError(f"scene {', '.join(missing)} not in the bench results given (they hold: "
                          f"{', '.join(scenes) or 'none'})")
    return {s: scenes[s] for s in only}
