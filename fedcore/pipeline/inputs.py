"""Run-time inputs of the pipelines: every task resolves its own config from them.

The pipelines take the config (a JSON object) and a list of `key=value` overrides
(`--set`) as pipeline inputs, and the sweep also its methods, seeds and
settings, with the compile-time values as defaults. A run from the KFP UI, or
`fedcore pipeline submit --set k=v`, changes them without recompiling; each task gets
them as parameters, so Kubeflow's cache keys follow them.

What a run may not change is the graph's shape: a setting holds as many (method, seed)
slots as were compiled, and each slot's method keeps the stages it was compiled with
(`check_stages`). Anything else raises a one-line ConfigError that says to recompile.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from fedcore.config import ExperimentConfig
from fedcore.errors import ConfigError
from fedcore.pipeline.plan import apply, check_own_overrides, run_overrides, shared_data, stage_names
from fedcore.registries import check_snapshot_root, config_from_dict


@dataclass(frozen=True)
class RunInputs:
    """What one task is told. slot -1: the experiment pipeline's one run (or a sweep's
    per-setting task, with `setting`); else the slot-th (method, seed) of `slots`."""

    config: dict[str, Any] | str
    overrides: Sequence[str] = ()
    setting: dict[str, Any] = field(default_factory=dict)
    methods: Sequence[str] = ()
    seeds: Sequence[int] = ()
    slot: int = -1
    slots: int = 0
    data_root: str = ""

    @property
    def setting_name(self) -> str:
        return str(self.setting.get("setting") or "")

    @property
    def row(self) -> str:
        """The sweep row this slot runs (a method or a built-in variant such as fedgr-robust); '' for slot -1."""
        return slot_of(self.methods, self.seeds, self.slot, self.slots)[0] if self.slot >= 0 else ""


def parse_config(config: dict[str, Any] | str, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """The pipeline's config input (a mapping, or its YAML/JSON text) plus its `--set` overrides, validated."""
    data = config
    if isinstance(config, str):
        try:  # JSON first: YAML 1.1 reads a JSON number such as 5e-05 as a string
            data = json.loads(config)
        except json.JSONDecodeError:
            try:
                data = yaml.safe_load(config) or {}
            except yaml.YAMLError as err:
                raise ConfigError(f"pipeline input config is neither JSON nor YAML ({type(err).__name__}); fix it") \
                    from None
    if not isinstance(data, dict) or isinstance(overrides, str) or not all(isinstance(o, str) for o in overrides):
        raise ConfigError("pipeline inputs must be config: a mapping (JSON object), overrides: a list of 'key=value'")
    return config_from_dict(dict(data), list(overrides))


def _setting_overrides(setting: dict[str, Any]) -> list[str]:
    over = setting.get("overrides", [])
    if not isinstance(over, list) or not all(isinstance(o, str) for o in over):
        raise ConfigError(f"sweep setting {setting!r} needs 'overrides': a list of 'key=value' strings")
    return over


def _method_overrides(setting: dict[str, Any], method: str) -> list[str]:
    """The sweep's own overrides for `method` (SweepSpec.method_overrides, carried by the setting item)."""
    own = setting.get("method_overrides") or {}
    over = own.get(method, []) if isinstance(own, dict) else None
    if not isinstance(over, list) or not all(isinstance(o, str) for o in over):
        raise ConfigError(f"sweep setting {setting.get('setting')!r}: 'method_overrides' must map a method name "
                          "to a list of 'key=value' strings")
    check_own_overrides(method, over)
    return over


def slot_of(methods: Sequence[str], seeds: Sequence[int], slot: int, slots: int) -> tuple[str, int]:
    """(method, seed) of a slot, methods major: slot = method index * len(seeds) + seed index."""
    if len(methods) * len(seeds) != slots:
        raise ConfigError(
            f"this sweep was compiled for {slots} runs per setting, but methods {list(methods)} x seeds "
            f"{list(seeds)} make {len(methods) * len(seeds)}; recompile it (fedcore pipeline compile sweep "
            "--method ... --seed ...) for another number of runs"
        )
    return methods[slot // len(seeds)], int(seeds[slot % len(seeds)])


def resolve(inp: RunInputs) -> ExperimentConfig:
    """The config of one task: base + overrides, then (sweep) the shared data seed, the
    setting, and the slot's method and seed, then (retrain) the snapshot's data root."""
    cfg = parse_config(inp.config, inp.overrides)
    if inp.setting:
        base = shared_data(cfg)
        setting = _setting_overrides(inp.setting)
        if inp.slot >= 0:
            method, seed = slot_of(inp.methods, inp.seeds, inp.slot, inp.slots)
            cfg = apply(base, run_overrides(base, setting, method, seed, _method_overrides(inp.setting, method)))
        else:
            cfg = apply(base, setting)
    check_snapshot_root(cfg, inp.data_root)  # a run-time data_prefix reaches the tasks here, not at compile time
    return apply(cfg, [f"data.root={inp.data_root}"]) if inp.data_root else cfg


def check_stages(cfg: ExperimentConfig, compiled: Sequence[str]) -> None:
    """Refuse a run-time config whose method declares other stages than the tasks compiled for it."""
    stages = stage_names(cfg)
    if list(stages) != list(compiled):
        raise ConfigError(
            f"method '{cfg.method.name}' has stages {list(stages)}, but this pipeline was compiled for "
            f"{list(compiled)}; recompile it for that method (fedcore pipeline compile ... --set method.name=...)"
        )
