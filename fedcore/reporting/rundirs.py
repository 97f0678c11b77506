"""The run dirs behind what a user passes to `fedcore compare` and `fedcore report`.

A `fedcore run` dir holds metrics.json itself. The run dir that `fedcore pipeline run --local
--out DIR` prints holds its runs deep down: DIR/kfp/<pipeline run>/<task>/checkpoint/, one per
stage task (each stage writes a run dir; the last one trained furthest), and MLflow's copies
under DIR/mlruns/, which are not run dirs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from fedcore.errors import UserError


def expand_run_dirs(paths: Sequence[str | Path]) -> list[Path]:
    """Each path as is when it holds metrics.json, else the runs of the pipeline run under it.

    A path with neither stays as it is, so `load_run` names what it lacks.
    """
    out: list[Path] = []
    for p in map(Path, paths):
        out += [p] if (p / "metrics.json").is_file() else pipeline_runs(p)
    return out


def pipeline_runs(path: Path) -> list[Path]:
    """The finished runs of the one pipeline run at `path` (DIR, or DIR/kfp/<pipeline run>).

    Several pipeline runs (`pipeline run` again into one --out) are refused with their names
    rather than merged: a rerun of the same seeds would count as extra seeds in mean ± std.
    """
    roots = [path] if path.parent.name == "kfp" else sorted(d for d in (path / "kfp").glob("*") if d.is_dir())
    found = {root: runs for root in roots if (runs := _final_runs(root))}
    if not found:
        return [path]
    if len(found) > 1:
        names = ", ".join(r.name for r in found)
        raise UserError(f"'{path}' holds {len(found)} pipeline runs ({names}); pass one of them, "
                        f"e.g. {next(iter(found))}")
    return next(iter(found.values()))


def _final_runs(root: Path) -> list[Path]:
    """Per run (its config_hash, which includes method and seed), the task's run dir that got
    furthest: the earlier stages' run dirs hold partial summaries."""
    best: dict[str, tuple[int, Path]] = {}
    for f in sorted(root.rglob("metrics.json")):
        try:
            rec = json.loads(f.read_text())
            key, rounds = str(rec["config_hash"]), int(rec.get("rounds") or 0)
        except (OSError, ValueError, KeyError, TypeError):
            key, rounds = str(f), 0  # kept on its own, so that load_run reports it as corrupt
        if key not in best or rounds > best[key][0]:
            best[key] = (rounds, f.parent)
    return sorted(p for _, p in best.values())
