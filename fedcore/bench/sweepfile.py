"""A scene's tuned settings as a sweep file (`method_overrides`), the format of
configs/sweeps/quickstart_tuned.yaml: `fedcore pipeline run --sweep FILE` (and `fedcore quickstart`)
run every row at its tuned setting, and `fedcore run CONFIG --sweep FILE` and `fedcore pipeline
run|compile retrain --sweep FILE` its `selected` row at its `selected_setting` (the bench's choice: a
method at its default or tuned setting). Written by `fedcore bench` (before it, by
experiments/tuned_presets.py).

`fedcore bench` also records the federation the rows were tuned and chosen on, as `scene`: the grid
scene's name and config, the overrides every method of it got (the scene's `set`, the bench's
`--set`, the validation split), the keys set to each run's seed, and the data, partition and noise
they gave (`federation`, less what a run's seed or machine decides). `fedcore run --sweep` applies
the overrides and refuses a config whose federation differs from it (`federation_mismatch`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from fedcore.config import ExperimentConfig
from fedcore.io.files import atomic_write_bytes
from fedcore.pipeline.plan import SweepScene
from fedcore.reporting.config_diff import describe_diff, flatten

SWEEP_HEADER = """\
# Tuned settings of the `{scene}` rows (lab/results/tuning.md protocol), written by
# {writer} from {runs}: per row {n} trials of `fedcore tune` on seed {seed}
# (a seed no table reports), objective {objective} on the clients' held-out validation split
# (data.validation.fraction={fraction}, noisy labels). A sweep applies each list after the row's
# method switch; the data, partition and noise stay the sweep's, shared by every row.
"""
SCENE_NOTE = """\
# `fedcore run CONFIG --sweep FILE` trains the selected row at its selected setting on `scene`: it applies
# scene.set (then --set) and refuses a CONFIG whose data, partition or noise differ from scene.federation.
"""
# Keys of the data, partition and noise that are not the federation: what each run's seed decides,
# where this machine keeps the files, and the validation split (a final model may train on every sample).
NOT_FEDERATION = ("data.seed", "data.root", "data.cache_dir", "data.validation.")


def federation(cfg: ExperimentConfig, seed_keys: Sequence[str] = ()) -> dict[str, Any]:
    """The config's data, partition and noise as dotted keys, less what is not the federation."""
    d = cfg.to_dict()
    flat = flatten({k: d[k] for k in ("data", "partition", "noise")})
    return {k: v for k, v in flat.items()
            if k not in seed_keys and not any(k == n or (n.endswith(".") and k.startswith(n)) for n in NOT_FEDERATION)}


def federation_mismatch(cfg: ExperimentConfig, scene: SweepScene) -> str | None:
    """What `cfg`'s federation differs in from the scene's ('noise.rate.value: 0.2 (this run) vs 0.4'), or None."""
    ours = federation(cfg, scene.seed_keys)
    return None if ours == scene.federation else describe_diff(ours, scene.federation, "this run")


def tuned_sweep(tunes: Mapping[str, dict], fixed: Mapping[str, Sequence[str]] | None = None,
                selected: tuple[str, str] | None = None, setting: str | None = None,
                scene: SweepScene | None = None) -> dict:
    """A sweep file's method_overrides: each row's fixed params (a variant's, e.g. FedGR's
    profile=robust), then its best_params as overrides, at full precision so the sweep reruns
    the tuned setting exactly. selected: (row, its registered method) the bench chose, recorded
    as `selected` (plus `selected_method` for a variant row); setting: the chosen setting
    (`selected_setting`, with each variant row's fixed params as `default_overrides`); scene: the
    federation (`scene`). Records from before settings were chosen pass neither."""
    fixed = fixed or {}
    head: dict = {} if scene is None else {"scene": scene.model_dump()}
    if selected is not None:
        row, method = selected
        head |= {"selected": row, **({"selected_method": method} if method != row else {})}
    if setting is not None:
        head["selected_setting"] = setting
        if defaults := {row: list(f) for row, f in sorted(fixed.items()) if row in tunes and f}:
            head["default_overrides"] = defaults
    return {**head, "method_overrides": {row: [*fixed.get(row, []),
                                               *(f"{k}={v!r}" for k, v in tune["best_params"].items())]
                                         for row, tune in sorted(tunes.items())}}


def sweep_text(scene: str, runs: Path, tunes: Mapping[str, dict], fraction: float, writer: str,
               fixed: Mapping[str, Sequence[str]] | None = None, selected: tuple[str, str] | None = None,
               setting: str | None = None, where: SweepScene | None = None) -> str:
    """The whole file: the header saying where the values come from, then the YAML."""
    first = next(iter(tunes.values()))
    counts = sorted({t["n_trials"] for t in tunes.values()})
    header = SWEEP_HEADER.format(scene=scene, writer=writer, runs=runs, n="/".join(map(str, counts)),
                                 seed=first["seed"], objective=first["objective"], fraction=fraction)
    header += SCENE_NOTE if where is not None else ""
    return header + yaml.safe_dump(tuned_sweep(tunes, fixed, selected, setting, where), sort_keys=False, width=120)


def read_tunes(scene_dir: Path) -> dict[str, dict]:
    """row -> tune.json of every finished tune under SCENE_DIR/ROW/tune."""
    return {p.parent.parent.name: json.loads(p.read_text()) for p in sorted(scene_dir.glob("*/tune/tune.json"))}


def write_if_changed(path: Path, text: str) -> bool:
    """Write `text` atomically unless the file holds it already (a rerun is a no-op); True when written."""
    if path.is_file() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, text.encode())
    return True
