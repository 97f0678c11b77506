"""Compile-time planning: the runs a pipeline makes, their config overrides and hashes.

Pipelines are compiled per config. Everything that decides the task graph (which
methods, their stages, which seeds and noise settings) is resolved here, once, and the
tasks receive the base config as YAML text plus a JSON list of `key=value` overrides and
the expected config hash, which they check (see `load_run_config`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fedcore.config import ExperimentConfig
from fedcore.errors import ConfigError
from fedcore.registries import config_from_dict


class SweepSpec(BaseModel):
    """What a sweep varies. Empty lists mean: the config's own method / seed / noise scene."""

    model_config = ConfigDict(extra="forbid")
    methods: list[str] = Field(default_factory=list, description="method names, e.g. [fedavg, fedprox]")
    seeds: list[int] = Field(default_factory=list, description="training seeds; the dataset is shared by all")
    settings: dict[str, list[str]] = Field(
        default_factory=dict, description="noise setting name -> overrides, e.g. {clean: [noise.type=none]}"
    )


@dataclass(frozen=True)
class RunPlan:
    """One (method, seed, setting) run: its overrides on the base config and what they give."""

    method: str
    seed: int
    overrides: tuple[str, ...]
    config_hash: str
    stages: tuple[str, ...]
    name: str


@dataclass(frozen=True)
class SettingPlan:
    """One noise setting: one prepared dataset, shared by all its runs."""

    name: str
    overrides: tuple[str, ...]
    data_hash: str
    runs: list[RunPlan] = field(default_factory=list)

    def item(self) -> dict[str, str]:
        """The ParallelFor item: flat string fields (kfp types sub-fields of static items as strings).

        The setting is under `setting`, not `name`: `item.name` is the loop channel's own name in kfp.
        """
        out = {"setting": self.name, "overrides": dumps(self.overrides), "data_hash": self.data_hash}
        for i, run in enumerate(self.runs):
            out[f"o{i}"] = dumps(run.overrides)
            out[f"h{i}"] = run.config_hash
        return out


def dumps(overrides: tuple[str, ...] | list[str]) -> str:
    return json.dumps(list(overrides))


def config_text(cfg: ExperimentConfig) -> str:
    """The resolved config as YAML: what pipelines pass to their tasks."""
    return cfg.to_yaml()


def load_run_config(config_yaml: str, overrides_json: str = "[]", expect_hash: str = "") -> ExperimentConfig:
    """Rebuild a task's config; refuse it when it no longer hashes to what the pipeline was compiled for."""
    try:
        data = yaml.safe_load(config_yaml) or {}
        overrides = json.loads(overrides_json or "[]")
    except (yaml.YAMLError, json.JSONDecodeError) as err:
        raise ConfigError(f"task config cannot be parsed ({type(err).__name__}); recompile the pipeline") from None
    if not isinstance(data, dict) or not isinstance(overrides, list):
        raise ConfigError("task config must be a YAML mapping plus a JSON list of overrides; recompile the pipeline")
    cfg = config_from_dict(data, [str(o) for o in overrides])
    if expect_hash and cfg.config_hash() != expect_hash:
        raise ConfigError(
            f"config hash {cfg.config_hash()} != {expect_hash} the pipeline was compiled for; "
            "recompile it from the config you mean to run"
        )
    return cfg


def apply(cfg: ExperimentConfig, overrides: list[str] | tuple[str, ...]) -> ExperimentConfig:
    return config_from_dict(cfg.to_dict(), list(overrides))


def stage_names(cfg: ExperimentConfig) -> tuple[str, ...]:
    from fedcore.methods.registry import build_method

    return tuple(s.name for s in build_method(cfg).stages)


def shared_data(cfg: ExperimentConfig) -> ExperimentConfig:
    """Pin data.seed so that every training seed of a sweep trains on the same dataset."""
    return apply(cfg, [f"data.seed={cfg.data_seed}"])


def method_overrides(base: ExperimentConfig, method: str) -> list[str]:
    # Another method's params would be rejected by this one's params model.
    return [] if method == base.method.name else [f"method.name={method}", "method.params={}"]


def plan_sweep(base: ExperimentConfig, spec: SweepSpec) -> list[SettingPlan]:
    """Settings x methods x seeds, each run's config validated and hashed; stages per method."""
    from fedcore.tracking.base import noise_label, run_name_for

    methods = spec.methods or [base.method.name]
    seeds = spec.seeds or [base.seed]
    settings = spec.settings or {noise_label(base): []}
    plans = []
    for name, set_overrides in settings.items():
        set_cfg = apply(base, set_overrides)  # validated: a setting may switch dataset or model
        runs = []
        for method in methods:
            for seed in seeds:
                overrides = (*set_overrides, *method_overrides(base, method), f"seed={seed}")
                cfg = apply(base, overrides)
                runs.append(RunPlan(method, seed, overrides, cfg.config_hash(), stage_names(cfg), run_name_for(cfg)))
        plans.append(SettingPlan(name, tuple(set_overrides), set_cfg.data_hash(), runs))
    _check_same_stages(plans)
    return plans


def _check_same_stages(plans: list[SettingPlan]) -> None:
    # One loop body serves every setting, so a run's stages may not depend on the setting.
    first = [r.stages for r in plans[0].runs]
    for p in plans[1:]:
        if [r.stages for r in p.runs] != first:
            raise ConfigError(f"setting '{p.name}' changes the stages of a method; sweep it in its own pipeline")


def load_sweep_spec(path: str | Path | None, overrides: dict[str, Any] | None = None) -> SweepSpec:
    """A sweep YAML (methods, seeds, settings) plus CLI values, which win."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"sweep file '{p}' not found; pass a YAML with methods, seeds and settings")
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError:
            raise ConfigError(f"sweep file '{p}' is not valid YAML; fix the syntax") from None
    data.update({k: v for k, v in (overrides or {}).items() if v})
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise ConfigError(f"invalid sweep spec at '{loc}': {first['msg']}") from None
