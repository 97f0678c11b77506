"""A bench grid: the YAML that names scenes, methods, the tuning budget and the seeds.

    scenes:
      quickstart: {config: configs/quickstart.yaml, set: [train.rounds=30]}
    methods: [fedavg, fedprox, fedgr-robust]
    trials: 8
    tuning_seed: 100
    seeds: [0, 1, 2]
    validation_fraction: 0.1
    start_at_default: true       # (the default) each tune's first trial is the row's own setting

Methods are registered method names or named variants: a method with fixed params (VARIANTS,
plus the grid's own `variants:`), tuned like any other row. Every method of a scene must train
on the same data, so a method's own place (a variant's `set`) may not touch data, partition,
noise or the seed, and the shared places (a scene's `set`, the CLI's `--set`) may not switch
the method or fix a seed, which would give the tuning seed the reporting seeds' data.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fedcore import safe_yaml
from fedcore.config import did_you_mean
from fedcore.errors import ConfigError
from fedcore.methods.registry import VARIANTS, Variant, available_methods

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # a folder name under --out
DATA_KEYS = ("data", "partition", "noise", "seed")
# Keys a shared override may not set: the rows' own method, and the seeds the grid draws.
SHARED_REFUSED = ("method", "seed", "data.seed")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Scene(Strict):
    config: str = Field(description="base experiment YAML, e.g. configs/quickstart.yaml")
    set: list[str] = Field(default_factory=list, description="overrides for every method of the scene")
    seed_keys: list[str] = Field(default_factory=list, description="keys set to each run's seed as well, e.g. "
                                 "data.params.seed for a benchmark drawn from its own seed")


class Grid(Strict):
    scenes: dict[str, Scene] = Field(min_length=1)
    methods: list[str] = Field(min_length=1)
    variants: dict[str, Variant] = Field(default_factory=dict)
    trials: int = Field(8, ge=1, description="finished `fedcore tune` trials per (scene, method)")
    start_at_default: bool = Field(True, description="each tune's first trial is the row's own setting (`fedcore "
                                   "tune --start-at-default`): a tuned row can only differ from its default by "
                                   "beating it on the tuning seed's validation; false for a random first trial")
    tuning_seed: int = Field(100, ge=0, description="the seed tunes run on; no table reports it")
    seeds: list[int] = Field(min_length=1, description="reporting seeds")
    validation_fraction: float = Field(0.1, gt=0.0, lt=1.0, description="each client's held-out noisy split")

    def variant(self, row: str) -> Variant:
        """The row as (method, fixed overrides): a variant, or a plain method with none."""
        return {**VARIANTS, **self.variants}.get(row) or Variant(method=row)


def load_grid(path: str | Path, trials: int | None = None, seeds: Sequence[int] | None = None,
              methods: Sequence[str] | None = None, shared: Sequence[str] = (),
              scenes: Sequence[str] | None = None) -> Grid:
    """The grid file with the CLI's values (which win), checked: names, keys, seeds, configs.
    scenes: only these of the grid's scenes, in this order (a grid split over machines or sessions,
    each part's OUT read together after by `fedcore bench-table`)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"grid file '{p}' not found; pass a YAML with scenes, methods, trials and seeds")
    data = safe_yaml.load_file(p, "grid file") or {}
    if not isinstance(data, dict):
        raise ConfigError(f"grid file '{p}' must hold a mapping (scenes, methods, trials, seeds)")
    data.update({k: v for k, v in (("trials", trials), ("seeds", seeds), ("methods", methods)) if v is not None})
    if scenes is not None:
        data["scenes"] = only_scenes(data.get("scenes"), scenes, p)
    try:
        grid = Grid.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(x) for x in first["loc"]) or "grid"
        raise ConfigError(f"invalid grid '{p}' at '{loc}': {first['msg']}") from None
    for name, scene in grid.scenes.items():
        scene.config = str(resolve_config(scene.config, p.parent, name))
    check_grid(grid, shared)
    return grid


def only_scenes(found: object, names: Sequence[str], path: Path) -> dict:
    """The grid file's scenes named in `names`, in that order; an unknown name is refused by name."""
    have = found if isinstance(found, dict) else {}
    if not names:
        raise ConfigError("--scenes names no scene; give one or more of the grid's, e.g. --scenes "
                          f"{next(iter(have), 'NAME')}")
    if unknown := [n for n in names if n not in have]:
        raise ConfigError(f"grid '{path}' has no scene {', '.join(map(repr, unknown))}; its scenes: "
                          f"{', '.join(have) or 'none'}")
    if len(set(names)) != len(names):
        raise ConfigError(f"--scenes names a scene twice: {', '.join(names)}")
    return {n: have[n] for n in names}


def resolve_config(config: str, grid_dir: Path, scene: str) -> Path:
    """A scene's config as given (from the working directory), else beside the grid file."""
    for cand in (Path(config), grid_dir / config):
        if cand.is_file():
            return cand
    raise ConfigError(f"scene '{scene}': config '{config}' not found (looked in the working directory and "
                      f"beside the grid file)")


def check_grid(grid: Grid, shared: Sequence[str] = ()) -> None:
    """Refuse what would make the comparison unfair or unreadable, each in one line."""
    known = set(available_methods())
    for name in [*grid.scenes, *grid.methods, *grid.variants]:
        if not NAME.match(name):
            raise ConfigError(f"grid name '{name}' must be a plain folder name (letters, digits, _ . -)")
    if len(set(grid.methods)) != len(grid.methods):
        raise ConfigError(f"methods lists a method twice: {grid.methods}")
    for row in grid.methods:
        if grid.variant(row).method not in known:
            variants = sorted({*VARIANTS, *grid.variants})
            raise ConfigError(f"unknown method '{row}'{did_you_mean(row, [*known, *variants])}; choose a registered "
                              f"method ({', '.join(sorted(known))}) "
                              f"or a variant ({', '.join(variants)})")
        if bad := keys_under(grid.variant(row).set, DATA_KEYS):
            raise ConfigError(f"variant '{row}' changes the data its scene shares between methods ({', '.join(bad)}); "
                              "put data, partition and noise changes in the scene's set or --set")
    if len(set(grid.seeds)) != len(grid.seeds):
        raise ConfigError(f"seeds lists a seed twice: {grid.seeds}")
    if grid.tuning_seed in grid.seeds:
        raise ConfigError(f"tuning_seed {grid.tuning_seed} is also a reporting seed; tune on a seed no table reports")
    for where, over in [("--set", list(shared)), *((f"scene '{n}' set", s.set) for n, s in grid.scenes.items())]:
        if bad := keys_under(over, SHARED_REFUSED):
            raise ConfigError(f"{where} sets {', '.join(bad)}: the grid's methods and seeds decide those "
                              "(a variant holds a method's fixed params)")


def keys_under(overrides: Sequence[str], prefixes: Sequence[str]) -> list[str]:
    """The overrides whose key is one of `prefixes` or lies under one ('noise.rate.max=1' under 'noise')."""
    def key(o: str) -> str:
        return o.split("=", 1)[0].strip()

    return [o for o in overrides if any(key(o) == p or key(o).startswith(p + ".") for p in prefixes)]
