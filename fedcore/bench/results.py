"""What a bench grid leaves behind: bench.json, a tuned sweep file and a report per scene.

    OUT/bench.json                  scenes.<name>: choice and choice_setting, runner_up, margin, means, set,
                                    seed_keys, rows, tuned, test_notes, commit (the code that wrote it)
    OUT/SCENE/tuned_sweep.yaml      the scene's tuned settings, its choice and federation (sweepfile.py's format)
    OUT/SCENE/report/report.md      `fedcore report` over the scene's runs, with the validation score and the
                                    chosen row marked
    OUT/SCENE/table.md              the scene's table in lab/results/tuning.md's format (tables.py)

A row is one run: method, setting (default|tuned), seed and its final scores; on a multi-label
scene the same names hold mAP (the scene's `metric` says which). `one_class` marks a run whose
model predicts a single class on test (the tables name it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedcore.bench.choice import choose
from fedcore.bench.grid import Grid, keys_under
from fedcore.bench.plan import RUN_THREADS, SETTINGS, diverged_marker, shared_overrides
from fedcore.bench.sweepfile import SweepScene, federation, read_tunes, sweep_text, write_if_changed
from fedcore.bench.tables import scene_table
from fedcore.data.files import HELD_OUT_NOTE
from fedcore.io import atomic_write_bytes
from fedcore.registries import load_config
from fedcore.reporting.report import write_report
from fedcore.tracking import git_commit

HELD_OUT = HELD_OUT_NOTE.split("{n}")[0]  # how the data's note on a held-out test split begins
# Row field -> the metrics.json summary key, {m} the scene's metric (acc, or mAP).
FIELDS = {"val_acc_last10": "final/val_{m}_last10", "acc_last10": "final/{m}_last10",
          "acc_best": "final/{m}_best", "acc_at_val_best": "final/{m}_at_val_best"}


def summary_of(run: Path) -> dict[str, Any] | None:
    try:
        return json.loads((run / "metrics.json").read_text())["summary"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def scene_rows(grid: Grid, out: Path, scene: str) -> tuple[list[dict[str, Any]], str]:
    """(rows, metric) of a scene's finished and diverged runs."""
    found: list[tuple[str, str, int, Path, dict | None]] = []
    for row in grid.methods:
        for setting in SETTINGS:
            for seed in grid.seeds:
                run = out / scene / row / setting / f"s{seed}"
                s = summary_of(run)
                if s is not None or diverged_marker(run).is_file():
                    found.append((row, setting, seed, run, s))
    metric = "mAP" if any(s and "final/mAP_last10" in s for *_, s in found) else "acc"
    return [run_row(row, setting, seed, run, metric) for row, setting, seed, run, _ in found], metric


def run_row(row: str, setting: str, seed: int, run: Path, metric: str | None = None) -> dict[str, Any]:
    """One run's row (its scores, or why it diverged); metric: acc or mAP (default: what the run logged)."""
    s = summary_of(run)
    metric = metric or ("mAP" if s and "final/mAP_last10" in s else "acc")
    rec: dict[str, Any] = {"method": row, "setting": setting, "seed": seed, "run": str(run)}
    rec.update({f: (None if s is None else s.get(k.format(m=metric))) for f, k in FIELDS.items()})
    if (one := one_class(run)) is not None:
        rec["one_class"] = one
    if s is None:
        rec["diverged"] = diverged_marker(run).read_text().strip()
    return rec


def one_class(run: Path) -> bool | None:
    """Whether the run's test confusion matrix (rows true, columns predicted) has one predicted
    class; None without one (a multi-label run writes none)."""
    try:
        matrix = json.loads((run / "confusion.json").read_text())
        predicted = [sum(c) for c in zip(*matrix, strict=True)]
    except (OSError, ValueError, TypeError):
        return None
    return sum(1 for c in predicted if c) == 1


def tuned_params(grid: Grid, out: Path, scene: str) -> dict[str, dict[str, Any]]:
    """method -> what its tune found: best_params (after the variant's fixed ones), best_value, trials."""
    tunes = read_tunes(out / scene)
    keep = ("best_params", "best_value", "objective", "n_trials", "n_pruned", "n_diverged", "seed")
    if grid.start_at_default:  # whether each tune ended at the default it started from
        keep += ("best_is_default",)
    return {row: {"fixed": grid.variant(row).set, **{k: tunes[row].get(k) for k in keep}}
            for row in grid.methods if row in tunes}


def scene_result(grid: Grid, out: Path, scene: str, cli_set: list[str] | None = None) -> dict[str, Any]:
    rows, metric = scene_rows(grid, out, scene)
    return {**choose(rows, grid.seeds), "metric": metric, "config": grid.scenes[scene].config,
            **scene_overrides(grid, scene, cli_set or []), "tuned": tuned_params(grid, out, scene), "rows": rows,
            "test_notes": test_notes(out, scene, grid.seeds), "commit": git_commit()}


def test_notes(out: Path, scene: str, seeds: list[int]) -> list[str]:
    """What the reporting seeds' artifacts say of their test split (their meta's notes), each once: a split held
    out of the labels as given makes every test column a score against labels as noisy as training's."""
    notes: list[str] = []
    for seed in seeds:
        try:
            meta = json.loads((out / scene / f"data-s{seed}" / "manifest.json").read_text())["meta"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a seed not prepared yet (--so-far) has nothing to say
        notes += [n for n in meta.get("notes", []) if n.startswith(HELD_OUT) and n not in notes]
    return notes


def scene_overrides(grid: Grid, scene: str, cli_set: list[str]) -> dict[str, list[str]]:
    """bench.json's record of the federation: every method's overrides of the config (`set`: the
    scene's, --set, the validation split) and the keys set to each run's seed (`seed_keys`). Tracking
    keys are left out: they never change results, and where the bench logged is not where a run of
    the pick should (a pipeline's --set points tracking.uri at its own store)."""
    sc = grid.scenes[scene]
    shared = shared_overrides(grid, sc, cli_set)
    tracking = keys_under(shared, ("tracking",))
    return {"set": [o for o in shared if o not in tracking], "seed_keys": list(sc.seed_keys)}


def sweep_scene(grid: Grid, scene: str, cli_set: list[str]) -> SweepScene:
    """The scene as the sweep file records it, its federation read from the config the runs loaded."""
    sc = grid.scenes[scene]
    over = scene_overrides(grid, scene, cli_set)["set"]
    return SweepScene(name=scene, config=sc.config, set=over, seed_keys=list(sc.seed_keys),
                      federation=federation(load_config(sc.config, over), sc.seed_keys))


def write_sweep(grid: Grid, out: Path, scene: str, cli_set: list[str], choice: str | None = None,
                setting: str | None = None) -> Path | None:
    """OUT/SCENE/tuned_sweep.yaml from the scene's tunes and its federation, with the choice as
    `selected` at `selected_setting` (if any)."""
    tunes = {r: t for r, t in read_tunes(out / scene).items() if r in grid.methods}
    if not tunes:
        return None
    path = out / scene / "tuned_sweep.yaml"
    fixed = {row: grid.variant(row).set for row in tunes}
    # A default choice needs no tune of its own (a --so-far scene may hold its default runs only).
    chosen = choice in tunes or (choice is not None and setting == "default")
    selected = (choice, grid.variant(choice).method) if chosen else None
    write_if_changed(path, sweep_text(scene, out / scene, tunes, grid.validation_fraction, "fedcore bench", fixed,
                                      selected, setting if chosen else None, sweep_scene(grid, scene, cli_set)))
    return path


def with_run_threads(grid: Grid, scene: str, cli_set: list[str]) -> list[str]:
    """--set as the scene's record gives it: with the thread count every job ran on, unless the scene's set or
    --set names one (a config's train.threads wins inside a run). A CPU sums in another order on another
    number of threads, so without it `fedcore run --sweep` repeated a row's accuracy but not its digits."""
    if keys_under([*grid.scenes[scene].set, *cli_set], ("train.threads",)):
        return cli_set
    return [*cli_set, f"train.threads={RUN_THREADS}"]


def report_labels(rows: list[dict[str, Any]], choice: str | None = None,
                  setting: str | None = None) -> dict[str, str]:
    """Run dir -> its group in the scene's report, 'ROW (default)' or 'ROW (tuned)', for every run that
    did not diverge: a variant row keeps its name (fedgr-robust, not fedgr with its params). The
    bench's choice at its setting reads 'ROW (tuned, chosen)', so the page marks the row it picked."""
    def name(r: dict[str, Any]) -> str:
        chosen = (r["method"], r["setting"]) == (choice, setting)
        return f"{r['method']} ({r['setting']}{', chosen' if chosen else ''})"

    return {str(Path(r["run"])): name(r) for r in rows if "diverged" not in r}


def write_results(grid: Grid, out: Path, cli_set: list[str],
                  left: Mapping[str, Mapping[str, int]] | None = None) -> dict[str, Any]:
    """bench.json (atomically), each scene's sweep file, table and report; returns bench.json's content.
    left: per scene with work still to do (`fedcore bench --so-far`), kept as its `still_to_run`, so
    that every table drawn from it says the scene is partial."""
    scenes = {}
    for name in grid.scenes:
        recorded = with_run_threads(grid, name, cli_set)
        scenes[name] = scene_result(grid, out, name, recorded)
        if left and name in left:
            scenes[name]["still_to_run"] = dict(left[name])
        sweep = write_sweep(grid, out, name, recorded, scenes[name]["choice"], scenes[name]["choice_setting"])
        labels = report_labels(scenes[name]["rows"], scenes[name]["choice"], scenes[name]["choice_setting"])
        report = write_report(list(labels), out / name / "report", labels) if labels else None
        scenes[name]["sweep"] = str(sweep) if sweep else None
        scenes[name]["report"] = str(report) if report else None
        write_if_changed(out / name / "table.md", scene_table(name, scenes[name]) + "\n")
    result = {"grid": {**grid.model_dump(mode="json", exclude={"scenes"}), "set": cli_set}, "scenes": scenes}
    atomic_write_bytes(out / "bench.json", json.dumps(result, indent=2).encode())
    return result
