"""A scene's tuned settings as a sweep file (`method_overrides`), the format of
configs/sweeps/quickstart_tuned.yaml: `fedcore pipeline run --sweep FILE` (and `fedcore quickstart`)
run every row at its tuned setting, and `fedcore pipeline run|compile retrain --sweep FILE` its `selected`
row (the bench's choice). Written by `fedcore bench` (before it, by experiments/tuned_presets.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

SWEEP_HEADER = """\
# Tuned settings of the `{scene}` rows (docs/results/tuning.md protocol), written by
# {writer} from {runs}: per row {n} trials of `fedcore tune` on seed {seed}
# (a seed no table reports), objective {objective} on the clients' held-out validation split
# (data.validation.fraction={fraction}, noisy labels). A sweep applies each list after the row's
# method switch; the data, partition and noise stay the sweep's, shared by every row.
"""


def tuned_sweep(tunes: Mapping[str, dict], fixed: Mapping[str, Sequence[str]] | None = None,
                selected: tuple[str, str] | None = None) -> dict:
    """A sweep file's method_overrides: each row's fixed params (a variant's, e.g. FedGR's
    profile=robust), then its best_params as overrides, at full precision so the sweep reruns
    the tuned setting exactly. selected: (row, its registered method) the bench chose, recorded
    as `selected` (plus `selected_method` for a variant row) for `fedcore pipeline ... retrain --sweep`."""
    fixed = fixed or {}
    head: dict = {}
    if selected is not None:
        row, method = selected
        head = {"selected": row, **({"selected_method": method} if method != row else {})}
    return {**head, "method_overrides": {row: [*fixed.get(row, []),
                                               *(f"{k}={v!r}" for k, v in tune["best_params"].items())]
                                         for row, tune in sorted(tunes.items())}}


def sweep_text(scene: str, runs: Path, tunes: Mapping[str, dict], fraction: float, writer: str,
               fixed: Mapping[str, Sequence[str]] | None = None, selected: tuple[str, str] | None = None) -> str:
    """The whole file: the header saying where the values come from, then the YAML."""
    first = next(iter(tunes.values()))
    counts = sorted({t["n_trials"] for t in tunes.values()})
    header = SWEEP_HEADER.format(scene=scene, writer=writer, runs=runs, n="/".join(map(str, counts)),
                                 seed=first["seed"], objective=first["objective"], fraction=fraction)
    return header + yaml.safe_dump(tuned_sweep(tunes, fixed, selected), sort_keys=False, width=120)


def read_tunes(scene_dir: Path) -> dict[str, dict]:
    """row -> tune.json of every finished tune under SCENE_DIR/ROW/tune."""
    return {p.parent.parent.name: json.loads(p.read_text()) for p in sorted(scene_dir.glob("*/tune/tune.json"))}


def write_if_changed(path: Path, text: str) -> bool:
    """Write `text` atomically unless the file holds it already (a rerun is a no-op); True when written."""
    from fedcore.io.files import atomic_write_bytes

    if path.is_file() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, text.encode())
    return True
