"""The bench protocol as pipeline tasks (pipelines/bench.py): what each component calls.

A task gets the grid as one pipeline input (`grid_input`: the grid with every scene's config
embedded, since a pod has no copy of the user's files) and works in its own output artifact,
laid out as `fedcore bench` lays out its --out dir (plan.py), so the same Jobs, runner and
result readers serve both:

    data artifact    SCENE/data-sSEED/        every seed's shared dataset, the tuning seed's too
    tune artifact    a `fedcore tune` dir      (tune.json, best.yaml, trials/)
    run artifact     a `fedcore run` dir       (metrics.json, model.pt, ...), or RUN.diverged beside it

A task's records travel as JSON strings: a run's row (results.run_row, plus `metric` and the
MLflow `run_id`) and a tune's record ({method, tune: tune.json, best_yaml}); `choose` splits them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from fedcore.bench.grid import Grid, check_grid
from fedcore.bench.plan import data_dir, data_jobs, row_base, run_job, tune_job
from fedcore.bench.results import run_row, summary_of
from fedcore.bench.runner import execute, prepare_data
from fedcore.errors import ConfigError
from fedcore.pipeline.runs import open_child
from fedcore.registries import load_config


def grid_input(grid: Grid) -> str:
    """The `grid` pipeline input: the grid (scene configs as given) plus each scene's config YAML."""
    configs = {name: load_config(scene.config).to_yaml() for name, scene in grid.scenes.items()}
    return json.dumps({"grid": grid.model_dump(mode="json"), "configs": configs})


@contextlib.contextmanager
def opened_grid(text: str) -> Iterator[Grid]:
    """The grid of a `grid` input, its scene configs written to a temporary folder for the task's life."""
    try:
        data = json.loads(text)
        grid, configs = dict(data["grid"]), dict(data["configs"])
    except (ValueError, KeyError, TypeError):
        raise ConfigError("pipeline input 'grid' is not a bench grid (JSON with grid and configs); "
                          "recompile with `fedcore pipeline compile bench GRID`") from None
    with tempfile.TemporaryDirectory(prefix="fedcore-bench-") as tmp:
        scenes = {}
        for name, scene in grid["scenes"].items():
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(configs[name])
            scenes[name] = {**scene, "config": str(path)}
        g = Grid.model_validate({**grid, "scenes": scenes})
        check_grid(g)
        yield g


def prepare(grid_text: str, overrides: Sequence[str], scene: str, out: str | Path) -> None:
    """Every seed's shared dataset of `scene` (the tuning seed's too) under OUT/SCENE/data-sSEED."""
    out = Path(out)
    with opened_grid(grid_text) as g:
        jobs = [j for j in data_jobs(g, out, list(overrides)) if j[0].parent == out / scene]
        prepare_data(jobs, say=print)


def tune(grid_text: str, overrides: Sequence[str], scene: str, row: str, data: str | Path,
         out: str | Path) -> dict[str, Any]:
    """The row's `fedcore tune` on the tuning seed's dataset into OUT; returns its record."""
    with opened_grid(grid_text) as g:
        job = tune_job(g, Path(out), scene, row, row_base(g, scene, row, list(overrides)))
        job = dataclasses.replace(job, out=Path(out), data=data_dir(Path(data), scene, g.tuning_seed))
        execute(job)
    return {"method": row, "tune": json.loads((Path(out) / "tune.json").read_text()),
            "best_yaml": (Path(out) / "best.yaml").read_text()}


def run(grid_text: str, overrides: Sequence[str], scene: str, item: dict[str, Any], data: str | Path,
        out: str | Path, tune_dir: str | Path | None = None, parent_run_id: str = "") -> dict[str, Any]:
    """One default or tuned run (item: row, setting, seed) into OUT; returns its row.

    Tracked runs are children of the pipeline's parent run; every run logs the served model, since
    the choice is a method at either setting, and the chosen run is registered."""
    row, setting, seed = _item(item)
    out = Path(out)
    with opened_grid(grid_text) as g:
        job = run_job(g, out, scene, row, setting, seed, row_base(g, scene, row, list(overrides)))
        if setting == "tuned":
            if tune_dir is None:
                raise ConfigError(f"the tuned run of '{row}' needs its tune's output")
            job = dataclasses.replace(job, config=str(Path(tune_dir) / "best.yaml"))
        cfg = load_config(job.config, list(job.overrides))
        rid = _open_child(cfg, parent_run_id, scene, row, f"{scene} {row} {setting} s{seed}", True)
        cfg = cfg.model_copy(update={"tracking": cfg.tracking.model_copy(update=rid)}) if rid else cfg
        config = out.parent / f"{out.name}.config.yaml"  # beside the run dir: the run's whole config
        out.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(cfg.to_yaml())
        job = dataclasses.replace(job, config=str(config), overrides=(), out=out,
                                  data=data_dir(Path(data), scene, seed))
        execute(job)
    summary = summary_of(out) or {}
    return {**run_row(row, setting, seed, out), "metric": "mAP" if "final/mAP_last10" in summary else "acc",
            "run_id": rid.get("run_id", "")}


def _item(item: dict[str, Any]) -> tuple[str, str, int]:
    try:
        row, setting, seed = str(item["row"]), str(item["setting"]), int(item["seed"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"bench run item {item!r} needs row, setting and seed") from None
    if setting not in ("default", "tuned"):
        raise ConfigError(f"bench run item {item!r}: setting must be default or tuned")
    return row, setting, seed


def _open_child(cfg: Any, parent_run_id: str, scene: str, row: str, name: str, log_model: bool) -> dict[str, Any]:
    """The run's MLflow child of the pipeline's parent, opened here so its id is known: the
    tracking fields that make the run resume it ({} without tracking)."""
    if cfg.tracking.backend == "none":
        return {}

    named = cfg.model_copy(update={"tracking": cfg.tracking.model_copy(update={"run_name": name})})
    return {"run_id": open_child(named, parent_run_id, scene, row), "run_name": name, "log_model": log_model}
