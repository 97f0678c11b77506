"""Join the parts of one grid into a bench record: the portable bench.json that lab/records/ keeps.

Usage: .venv/bin/python lab/bench_record.py OUT [OUT ...] --out lab/records/NAME.json [--scenes a,b]

A grid too long for one machine or one sitting runs in parts, `fedcore bench GRID --scenes a
--out A` here and `--scenes b --out B` elsewhere (or later). This script joins their finished
scenes into one bench.json whose run, sweep and report paths are relative to a bench dir
(SCENE/ROW/SETTING/sSEED), as if one OUT had held them all. A record is also a valid source, so a
later part joins an earlier record, and --out may be one of the inputs. `fedcore bench-table FILE`
reads a record as it reads an OUT. (It was `fedcore bench-record`; it lives here because only our
pages keep records: a user reads parts together with `fedcore bench-table A B`.)

What it refuses, each in one line and exit 2: parts of different grids (any grid key but the
scenes: methods, trials, seeds, tuning seed, validation split, --set, start_at_default, variants), a
scene in two parts with different results (the same results twice, a record and the OUT it came
from, are one scene), a scene with work still to run (`fedcore bench --so-far`'s partial scenes): a
record's scenes are finished, as a page's tables need; and a scene that names no commit: a record
names the code that produced it, so a page can be traced to it without rerunning anything.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path, PurePath, PurePosixPath
from typing import Any

from fedcore.bench.tables import read_bench
from fedcore.errors import ConfigError, UserError
from fedcore.io import atomic_write_bytes

# A scene's `commit` as bench.json writes it (git_commit(): a full sha, or "unknown" without git).
SHA = re.compile(r"[0-9a-f]{40}")
# Keys that say which code wrote a scene, not what it measured: a later rewrite of the same results
# (or the note on a commit filled in from the history) leaves the results the same.
PROVENANCE = ("commit", "commit_note")

# Path field of a scene or row -> how many trailing parts lie under OUT (results.py's layout).
ROW_PATH = ("run", 4)  # SCENE/ROW/SETTING/sSEED
SCENE_PATHS = (("sweep", 2), ("report", 3))  # SCENE/tuned_sweep.yaml, SCENE/report/report.md


def under_out(path: str | None, parts: int, scene: str, source: Path) -> str | None:
    """`path` from the scene's folder on (OUT's prefix dropped), in POSIX form."""
    if path is None:
        return None
    tail = PurePath(path).parts[-parts:]
    if len(tail) < parts or tail[0] != scene:
        raise ConfigError(f"'{source}': scene '{scene}' has path '{path}', not under OUT/{scene}/; pass a "
                          "bench.json as `fedcore bench` wrote it")
    return str(PurePosixPath(*tail))


def portable(scene: dict[str, Any], name: str, source: Path) -> dict[str, Any]:
    """The scene with every path relative to a bench dir."""
    field, parts = ROW_PATH
    rows = [{**r, field: under_out(r.get(field), parts, name, source)} for r in scene.get("rows", [])]
    return {**scene, **{f: under_out(scene.get(f), n, name, source) for f, n in SCENE_PATHS}, "rows": rows}


def same_results(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two scene records hold the same results, whichever commit last wrote each bench.json."""
    return ({k: v for k, v in a.items() if k not in PROVENANCE}
            == {k: v for k, v in b.items() if k not in PROVENANCE})


def grid_difference(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return sorted(k for k in {*a, *b} if a.get(k) != b.get(k))


def join_records(sources: Sequence[str | Path], scenes: Sequence[str] | None = None
                 ) -> tuple[dict[str, Any], dict[str, Path]]:
    """(the joined bench.json, scene -> the file it came from). scenes: only these, in this order
    (every scene of every source otherwise, in the order given)."""
    if not sources:
        raise ConfigError("give one or more `fedcore bench` OUT dirs (or bench.json files) to record")
    grid: dict[str, Any] | None = None
    first = Path()
    found: dict[str, dict[str, Any]] = {}
    origin: dict[str, Path] = {}
    for src in sources:
        f, data = read_bench(src)
        if grid is None:
            grid, first = data.get("grid") or {}, f
        elif diff := grid_difference(grid, data.get("grid") or {}):
            raise ConfigError(f"'{f}' ran another grid than '{first}' (its {', '.join(diff)} differ); a record joins "
                              "the parts of one grid")
        for name, scene in data["scenes"].items():
            if scenes is not None and name not in scenes:
                continue
            if left := scene.get("still_to_run"):
                raise ConfigError(f"scene '{name}' in '{f}' is partial ({left.get('tune_trials', 0)} tune trials and "
                                  f"{left.get('runs', 0)} runs still to run): finish it with `fedcore bench`, "
                                  "or leave it out with --scenes")
            if not SHA.fullmatch(str(scene.get("commit", ""))):
                raise ConfigError(f"scene '{name}' in '{f}' names no commit ({scene.get('commit', 'none')!r}): a "
                                  "record names the code that produced it; run `fedcore bench` in a git checkout "
                                  "(or with FEDCORE_GIT_COMMIT set)")
            scene = portable(scene, name, f)
            if name in found:
                if same_results(scene, found[name]):  # a record and the OUT it was taken from
                    continue
                raise ConfigError(f"scene '{name}' is in both '{origin[name]}' and '{f}', with different results; "
                                  "keep one with --scenes")
            found[name], origin[name] = scene, f
    if scenes is not None and (missing := [n for n in scenes if n not in found]):
        raise ConfigError(f"no scene {', '.join(map(repr, missing))} in the bench results given; they hold "
                          f"{', '.join(found) or 'none of those asked for'}")
    if not found:
        raise ConfigError("the bench results given hold no scene to record")
    order = list(scenes) if scenes is not None else list(found)
    return {"grid": grid, "scenes": {n: found[n] for n in order}}, {n: origin[n] for n in order}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", type=Path, help="`fedcore bench` OUT dirs (or bench.json files, records "
                    "included) of one grid's parts")
    ap.add_argument("--out", "-o", type=Path, required=True, help="the record to write, e.g. "
                    "lab/records/NAME.json (may be one of the inputs)")
    ap.add_argument("--scenes", help="only these scenes, in this order, e.g. a,b (every finished scene given "
                    "otherwise)")
    args = ap.parse_args(argv)
    scenes = None if args.scenes is None else [s.strip() for s in args.scenes.split(",") if s.strip()]
    try:
        record, origin = join_records(args.results, scenes)
    except UserError as err:
        print(f"bench_record: {err}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(args.out, (json.dumps(record, indent=2) + "\n").encode())
    for name, scene in record["scenes"].items():
        print(f"{name}: chose {scene['choice']} ({scene.get('choice_setting') or 'tuned'}), commit "
              f"{scene['commit'][:9]}  [from {origin[name]}]")
    print(f"wrote {args.out} ({len(record['scenes'])} scenes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
