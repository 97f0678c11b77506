"""The bench pipeline's `choose` task: the choice from the rows, bench.json, and the chosen model.

The choice is `choice.choose` over the scene's rows, as `fedcore bench` makes it. The task
writes the tunes it was handed under OUT/SCENE/ROW/tune/ (the bench layout), so bench.json,
the sweep file (with `selected`) and the tuned params come from results.py unchanged. In
MLflow, the parent run gets the rows as a table, the choice as tags and the files as
artifacts; the chosen method's run at the chosen setting (default or tuned) with the best validation
score (over the reporting seeds: test never decides) is registered as a new version with alias `selected`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fedcore.bench.choice import SCORE, choose
from fedcore.bench.grid import Grid
from fedcore.bench.results import report_labels, scene_overrides, tuned_params, with_run_threads, write_sweep
from fedcore.bench.tasks import opened_grid
from fedcore.config import ExperimentConfig
from fedcore.io import atomic_write_bytes
from fedcore.pipeline.runs import tracker_for
from fedcore.reporting.report import write_report
from fedcore.tracking.registry import ModelRegistry

SELECTED = "selected"


def choose_task(grid_text: str, overrides: list[str], scene: str, records: Iterable[Mapping[str, Any]],
                out: Path, cfg: ExperimentConfig, parent_run_id: str, model_name: str,
                previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The whole `choose` task: bench.json (the scenes of `previous`, then this one) under OUT,
    the registration, and the parent run's record; returns bench.json's content."""
    with opened_grid(grid_text) as g:
        given = json.loads(grid_text)["grid"]["scenes"][scene]["config"]  # as the grid names it
        result = scene_result(g, out, scene, records, given, overrides)
        head = {**g.model_dump(mode="json", exclude={"scenes"}), "set": list(overrides)}
    result["model"] = register_choice(cfg, model_name, scene, result)
    bench = {"grid": head, "scenes": {**dict((previous or {}).get("scenes", {})), scene: result}}
    atomic_write_bytes(out / "bench.json", json.dumps(bench, indent=2).encode())
    files = [out / "bench.json", *(Path(p) for p in (result["sweep"], result["report"]) if p)]
    if result["report"]:
        files += sorted(Path(result["report"]).parent.glob("*.png"))
    log_choice(cfg, parent_run_id, scene, result, files)
    return bench


def split_records(records: Iterable[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """(run rows, row -> tune record) of what the run and tune tasks returned."""
    rows, tunes = [], {}
    for r in records:
        if "tune" in r:
            tunes[r["method"]] = dict(r)
        else:
            rows.append(dict(r))
    return rows, tunes


def selected_run(rows: Iterable[Mapping[str, Any]], choice: str | None,
                 setting: str | None = "tuned") -> Mapping[str, Any] | None:
    """The chosen row's run at the chosen setting to register: best validation score, then the lowest seed."""
    mine = [r for r in rows if r["method"] == choice and r.get("setting") == setting and r.get(SCORE) is not None]
    return min(mine, key=lambda r: (-float(r[SCORE]), r["seed"])) if mine else None


def scene_result(grid: Grid, out: Path, scene: str, records: Iterable[Mapping[str, Any]],
                 config: str, overrides: Iterable[str] = ()) -> dict[str, Any]:
    """bench.json's entry for `scene`, its tunes written under OUT/SCENE and its sweep file beside them."""
    rows, tunes = split_records(records)
    for row, t in tunes.items():
        atomic_write_bytes(out / scene / row / "tune" / "tune.json", json.dumps(t["tune"], indent=2).encode())
        atomic_write_bytes(out / scene / row / "tune" / "best.yaml", str(t.get("best_yaml", "")).encode())
    metric = "mAP" if any(r.get("metric") == "mAP" for r in rows) else "acc"
    rows = sorted(({k: v for k, v in r.items() if k != "metric"} for r in rows),
                  key=lambda r: (r["method"], r["setting"], r["seed"]))
    recorded = with_run_threads(grid, scene, list(overrides))  # its tasks run each job on one thread too
    result = {**choose(rows, grid.seeds), "metric": metric, "config": config,
              **scene_overrides(grid, scene, recorded), "tuned": tuned_params(grid, out, scene), "rows": rows}
    sweep = write_sweep(grid, out, scene, recorded, result["choice"], result["choice_setting"])
    result["sweep"] = str(sweep) if sweep else None
    result["report"] = _report(report_labels(rows, result["choice"], result["choice_setting"]), out / scene / "report")
    return result


def _report(labels: dict[str, str], out: Path) -> str | None:
    """`fedcore report` over the runs (run dir -> its row and setting), where their dirs are readable
    here (kfp.local puts every artifact on this machine; on a cluster each run's dir is in its own
    task's storage)."""
    if not labels or not all((Path(r) / "metrics.json").is_file() for r in labels):
        return None

    return str(write_report(list(labels), out, labels))


def register_choice(cfg: ExperimentConfig, model_name: str, scene: str, result: Mapping[str, Any]) -> dict | None:
    """Register the chosen run's model (the chosen method at the chosen setting) as a new version of
    `model_name` with alias `selected`."""
    run = selected_run(result["rows"], result["choice"], result["choice_setting"])
    if cfg.tracking.backend == "none" or run is None or not run.get("run_id"):
        return None
    registry = ModelRegistry(cfg.tracking.uri, Path.cwd())
    version = registry.register(model_name, run["run_id"], tags={"bench.scene": scene, "bench.method": run["method"],
                                                                  "bench.setting": run["setting"],
                                                                  "bench.seed": str(run["seed"]),
                                                                  f"bench.{SCORE}": f"{run[SCORE]:.6f}"})
    registry.set_alias(version, SELECTED)
    return {"name": model_name, "version": version.version, "run_id": run["run_id"], "seed": run["seed"],
            "alias": SELECTED}


def log_choice(cfg: ExperimentConfig, parent_run_id: str, scene: str, result: Mapping[str, Any],
               files: Iterable[Path]) -> None:
    """The scene's rows as a table, its choice as tags and `files` as artifacts, on the parent run."""
    if not parent_run_id or cfg.tracking.backend == "none":
        return

    tracker = tracker_for(cfg)
    tracker.start("", {}, run_id=parent_run_id)
    rows = result["rows"]
    columns = ["method", "setting", "seed", SCORE, "acc_last10", "acc_best", "acc_at_val_best"]
    tracker.log_table({c: [r.get(c) for r in rows] for c in columns}, f"bench/{scene}/rows.json")
    tracker.set_tags({f"bench.{scene}.choice": str(result["choice"]),
                      f"bench.{scene}.choice_setting": str(result.get("choice_setting")),
                      f"bench.{scene}.runner_up": str(result["runner_up"]),
                      f"bench.{scene}.margin": "" if result["margin"] is None else f"{result['margin']:.6f}"})
    for f in files:
        if f.is_file():
            tracker.log_artifact(f, f"bench/{scene}")
    tracker.end("FINISHED")  # the exit handler still ends it FAILED if a later task fails
