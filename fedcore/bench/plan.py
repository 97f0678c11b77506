"""The work of a bench grid: one tune per (scene, method), then a run per (setting, seed).

    OUT/SCENE/data-sSEED/           the one artifact every method of the seed trains on
    OUT/SCENE/METHOD/tune/          a `fedcore tune` dir (on the tuning seed, its own artifact)
    OUT/SCENE/METHOD/SETTING/sSEED  a `fedcore run` dir; SETTING is default or tuned

What is done is read from disk, so a rerun does only what is missing: a tune with the grid's
trials finished (tune.json), a run with metrics.json, or one that diverged before (sSEED.diverged:
the same data, seed and setting would diverge again).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedcore.bench.grid import Grid, Scene
from fedcore.errors import ConfigError
from fedcore.pipeline.plan import method_switch
from fedcore.registries import load_config

SETTINGS = ("default", "tuned")
# The CPU threads `fedcore bench` runs every job on (runner.execute), as the tuning page's runs had.
RUN_THREADS = 1


@dataclass(frozen=True)
class Job:
    """One tune or one run; `config` plus `overrides` is its whole config."""

    kind: str  # "tune" | "run"
    scene: str
    row: str
    setting: str  # "" for a tune
    seed: int
    config: str
    overrides: tuple[str, ...]
    out: Path
    data: Path
    trials: int = 0
    start_at_default: bool = False  # a tune's: its first trial is the row's own setting

    @property
    def label(self) -> str:
        what = "tune" if self.kind == "tune" else f"{self.setting} s{self.seed}"
        return f"{self.scene} {self.row} {what}"

    @property
    def cost(self) -> int:
        """Progress units: a run is one, a tune its trials still to go (each about one run)."""
        return max(self.trials - finished_trials(self.out), 1) if self.kind == "tune" else 1


def shared_overrides(grid: Grid, scene: Scene, cli_set: list[str]) -> list[str]:
    """What every method of the scene gets, the validation split last (the protocol fixes it)."""
    return [*scene.set, *cli_set, f"data.validation.fraction={grid.validation_fraction}"]


def row_overrides(grid: Grid, row: str, base_method: str) -> list[str]:
    """The switch from the scene's own method to the row's (as sweeps switch), then the row's fixed params."""
    v = grid.variant(row)
    return [*method_switch(base_method, v.method), *v.set]


def seed_overrides(scene: Scene, seed: int) -> list[str]:
    return [f"seed={seed}", *(f"{k}={seed}" for k in scene.seed_keys)]


def data_dir(out: Path, scene: str, seed: int) -> Path:
    return out / scene / f"data-s{seed}"


def finished_trials(tune: Path) -> int:
    try:
        return int(json.loads((tune / "tune.json").read_text())["n_trials"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def tune_job(grid: Grid, out: Path, name: str, row: str, base: list[str]) -> Job:
    scene = grid.scenes[name]
    return Job("tune", name, row, "", grid.tuning_seed, scene.config,
               (*base, *seed_overrides(scene, grid.tuning_seed)), out / name / row / "tune",
               data_dir(out, name, grid.tuning_seed), grid.trials, grid.start_at_default)


def run_job(grid: Grid, out: Path, name: str, row: str, setting: str, seed: int, base: list[str]) -> Job:
    """A default run is the scene's config with the row's overrides; a tuned one is the tune's best.yaml
    (which holds them all, on the tuning seed) moved to the reporting seed."""
    scene = grid.scenes[name]
    config, over = (scene.config, base) if setting == "default" else (str(out / name / row / "tune" / "best.yaml"), [])
    return Job("run", name, row, setting, seed, config, (*over, *seed_overrides(scene, seed)),
               out / name / row / setting / f"s{seed}", data_dir(out, name, seed))


def is_done(job: Job) -> bool:
    if job.kind == "tune":
        return finished_trials(job.out) >= job.trials
    return (job.out / "metrics.json").is_file() or diverged_marker(job.out).is_file()


def diverged_marker(run: Path) -> Path:
    return run.parent / f"{run.name}.diverged"


def row_base(grid: Grid, name: str, row: str, cli_set: list[str]) -> list[str]:
    """A row's overrides of its scene's config, before any seed: the shared ones, then its own."""
    scene = grid.scenes[name]
    shared = shared_overrides(grid, scene, cli_set)
    return [*shared, *row_overrides(grid, row, load_config(scene.config, shared).method.name)]


def plan_grid(grid: Grid, out: Path, cli_set: list[str]) -> tuple[list[Job], dict[Job, list[Job]]]:
    """(tunes and default runs, each tune's tuned runs): every config loaded, so a bad method
    param or key fails here, before anything runs."""
    first: list[Job] = []
    after: dict[Job, list[Job]] = {}
    for name, scene in grid.scenes.items():
        for row in grid.methods:
            base = row_base(grid, name, row, cli_set)
            try:
                load_config(scene.config, [*base, *seed_overrides(scene, grid.tuning_seed)])
            except ConfigError as err:
                raise variant_error(grid, row, err) from None
            tune = tune_job(grid, out, name, row, base)
            first.append(tune)
            first += [run_job(grid, out, name, row, "default", s, base) for s in grid.seeds]
            after[tune] = [run_job(grid, out, name, row, "tuned", s, base) for s in grid.seeds]
    return first, after


def variant_error(grid: Grid, row: str, err: ConfigError) -> ConfigError:
    """A row's config refusal, naming the variant whose `set` the user wrote rather than the method
    under it (`fedgr-robust`, not `fedgr`); a plain method's refusal as it is."""
    v = grid.variant(row)
    if not v.set:
        return err
    text = str(err).replace(f" (method '{v.method}')", "")
    return ConfigError(f"{text} (variant '{row}' of method '{v.method}', set: {', '.join(v.set)})")


def grid_todo(jobs: list[Job]) -> list[dict[str, Any]]:
    """Per (scene, row), in the grid's order: [done, planned] of its tune's trials and of its default
    and tuned runs (what `fedcore bench --dry-run` prints)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for j in jobs:
        r = rows.setdefault((j.scene, j.row), {"scene": j.scene, "row": j.row, "trials": [0, 0],
                                               "default": [0, 0], "tuned": [0, 0]})
        if j.kind == "tune":
            r["trials"] = [min(finished_trials(j.out), j.trials), j.trials]
        else:
            r[j.setting][0] += int(is_done(j))
            r[j.setting][1] += 1
    return list(rows.values())


def scene_left(todo: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per scene with work left, from grid_todo's rows: the tune trials and the runs still to do."""
    left: dict[str, dict[str, int]] = {}
    for r in todo:
        trials = r["trials"][1] - r["trials"][0]
        runs = sum(r[s][1] - r[s][0] for s in ("default", "tuned"))
        if trials or runs:
            scene = left.setdefault(r["scene"], {"tune_trials": 0, "runs": 0})
            scene["tune_trials"] += trials
            scene["runs"] += runs
    return left


def data_jobs(grid: Grid, out: Path, cli_set: list[str]) -> list[tuple[Path, str, list[str]]]:
    """(artifact dir, config, overrides) of every seed's shared artifact, the tuning seed's too."""
    jobs = []
    for name, scene in grid.scenes.items():
        shared = shared_overrides(grid, scene, cli_set)
        for seed in [grid.tuning_seed, *grid.seeds]:
            jobs.append((data_dir(out, name, seed), scene.config, [*shared, *seed_overrides(scene, seed)]))
    return jobs
