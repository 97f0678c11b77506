"""Finished work that another grid left under OUT: refused by name, never reported.

A rerun skips what is done (plan.is_done), so a grid edited between two runs into the same OUT (a
scene's `set`, a variant's params, `--set`, `start_at_default`) would report the old grid's runs
under the new grid's name. Each finished job is checked against the config the grid gives it now;
an unfinished one is checked where it resumes (a run's checkpoint, a tune's study).
"""

from __future__ import annotations

import json
from pathlib import Path

from fedcore.bench.plan import Job
from fedcore.errors import ConfigError
from fedcore.registries import load_config
from fedcore.reporting.config_diff import describe_diff
from fedcore.tuning.space import as_overrides


def stale(job: Job) -> str | None:
    """What differs between the job's finished work on disk and the grid's config for it, as
    'train.rounds: 30 (on disk) vs 40'; None when it matches or nothing has finished."""
    if job.kind == "tune":
        record = _json(job.out / "tune.json")
        if record is None:
            return None
        started = bool(record.get("start_at_default", False))  # tunes from before the flag did not
        if started != job.start_at_default:
            return f"start_at_default: {str(started).lower()} (on disk) vs {str(job.start_at_default).lower()}"
        stored = load_config(job.out / "best.yaml")
        expected = load_config(job.config, [*job.overrides, *as_overrides(record["best_params"])])
        stored_hash = stored.config_hash()
    else:
        record = _json(job.out / "metrics.json")
        if record is None or not Path(job.config).is_file():  # a tuned run whose tune has not ended
            return None
        expected = load_config(job.config, list(job.overrides))
        stored_hash = record["config_hash"]
        stored = None
    expected_hash = expected.config_hash()
    if stored_hash == expected_hash:
        return None
    if stored is None and (job.out / "config.yaml").is_file():
        stored = load_config(job.out / "config.yaml")
    if stored is None:
        return f"config {stored_hash} (on disk) vs {expected_hash}"
    return describe_diff(stored.digested(), expected.digested(), "on disk") or "the config differs"


def refuse_stale(jobs: list[Job]) -> None:
    """Raise on the first finished job that another grid made."""
    for job in jobs:
        if why := stale(job):
            raise ConfigError(f"'{job.out}' holds work of another grid ({why}); rerun the grid it was made with, "
                              "or give this one another --out")


def _json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
