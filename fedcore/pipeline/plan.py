"""Compile-time planning: the shape of a pipeline's task graph and its inputs' defaults.

A pipeline is compiled from a config, but what it runs is decided at run time: its tasks
receive the pipeline's inputs (the config YAML, the `--set` overrides, and for a sweep
the methods, seeds and settings) and resolve their own config from them
(`fedcore.pipeline.inputs`). What the graph's shape needs is fixed here: how many
(method, seed) runs a setting has and which stages each runs, one task per stage.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fedcore import safe_yaml
from fedcore.config import ExperimentConfig
from fedcore.errors import ConfigError
from fedcore.methods.registry import VARIANTS, build_method
from fedcore.registries import config_from_dict
from fedcore.tracking.base import noise_label, run_name_for


class SweepScene(BaseModel):
    """The grid scene a bench's sweep file was tuned and chosen on."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="the grid's scene name")
    config: str = Field("", description="the scene's base config, as the bench found it")
    set: list[str] = Field(default_factory=list, description="every method's overrides: the scene's set, the "
                           "bench's --set, the validation split")
    seed_keys: list[str] = Field(default_factory=list, description="keys set to the run's seed as well")
    federation: dict[str, Any] = Field(default_factory=dict, description="data/partition/noise keys (dotted) "
                                       "that `set` gave on `config`, less bench.sweepfile.NOT_FEDERATION and seed_keys")


class SweepSpec(BaseModel):
    """What a sweep varies. Empty lists mean: the config's own method / seed / noise scene."""

    model_config = ConfigDict(extra="forbid")
    methods: list[str] = Field(default_factory=list, description="method names, e.g. [fedavg, fedprox]")
    seeds: list[int] = Field(default_factory=list, description="training seeds; the dataset is shared by all")
    settings: dict[str, list[str]] = Field(
        default_factory=dict, description="noise setting name -> overrides, e.g. {clean: [noise.type=none]}"
    )
    setting_methods: dict[str, list[str]] = Field(
        default_factory=dict, description="setting name -> the methods it runs (default: every method), "
        "e.g. {clean: [fedavg]} for a clean reference of FedAvg alone; local runs only"
    )
    method_overrides: dict[str, list[str]] = Field(
        default_factory=dict, description="method name -> overrides for that method's runs in every setting, "
        "e.g. {coteaching: [train.lr=0.03, method.params.forget_rate=0.09]} for its tuned setting"
    )
    selected: str = Field("", description="the row `fedcore bench` chose (a method_overrides key); the retrain "
                          "pipeline trains it with --sweep FILE; a sweep ignores it")
    selected_method: str = Field("", description="the registered method of `selected` when that row is a variant "
                                 "(e.g. fedgr for fedgr-robust); empty: `selected` is a method")
    selected_setting: Literal["", "default", "tuned"] = Field(
        "", description="the setting of `selected` the bench chose: default (the row's own params, its "
        "default_overrides) or tuned (its method_overrides); empty: tuned, as files from before it")
    default_overrides: dict[str, list[str]] = Field(
        default_factory=dict, description="row -> its default setting's own overrides (a variant's fixed params)")
    scene: SweepScene | None = Field(None, description="the federation the rows were tuned and chosen on; "
                                     "`fedcore run --sweep` applies it, a sweep ignores it")


StageShape = tuple[tuple[str, tuple[str, ...]], ...]  # (stage name, what it yields) per stage


@dataclass(frozen=True)
class RunPlan:
    """One (method, seed) slot of a setting: the stages its tasks run, and a display name."""

    method: str
    seed: int
    stages: StageShape
    name: str

    @property
    def stage_names(self) -> list[str]:
        return [name for name, _ in self.stages]


@dataclass(frozen=True)
class SettingPlan:
    """One noise setting: one prepared dataset, shared by all its runs."""

    name: str
    overrides: tuple[str, ...]
    data_hash: str
    runs: list[RunPlan] = field(default_factory=list)
    active: tuple[int, ...] = ()  # the slots of `runs` this setting trains (SweepSpec.setting_methods)
    method_overrides: dict[str, tuple[str, ...]] = field(default_factory=dict)  # SweepSpec.method_overrides

    @property
    def restricted(self) -> bool:
        return len(self.active) < len(self.runs)

    def item(self) -> dict[str, Any]:
        """The setting as the sweep's `settings` pipeline input holds it (one ParallelFor item).

        The name is under `setting`, not `name`: `item.name` is the loop channel's own name in kfp.
        Per-method overrides ride in the item because every task already receives it.
        """
        item: dict[str, Any] = {"setting": self.name, "overrides": list(self.overrides)}
        if self.method_overrides:
            item["method_overrides"] = {m: list(o) for m, o in self.method_overrides.items()}
        return item


def config_input(cfg: ExperimentConfig) -> str:
    """The config as the default of a pipeline's `config` input: one line of JSON.

    A string, not a JSON object: Kubeflow stores object defaults as protobuf Structs, whose
    numbers are all doubles, and a free dict such as method.params would come back with
    5.0 for 5 (another config hash); and one line, as kfp's package header holds defaults.
    """
    return json.dumps(cfg.to_dict(), sort_keys=False)


def apply(cfg: ExperimentConfig, overrides: list[str] | tuple[str, ...]) -> ExperimentConfig:
    return config_from_dict(cfg.to_dict(), list(overrides))


def require_served_model(cfg: ExperimentConfig) -> None:
    """The retrain pipeline registers each run's served MLflow model, so its runs must log one
    (checked at compile time and again at decision time, where a run-time override may differ)."""
    if not cfg.tracking.log_model:
        raise ConfigError("the retrain pipeline registers each run's served MLflow model; "
                          "drop tracking.log_model=false")


def stage_names(cfg: ExperimentConfig) -> tuple[str, ...]:
    return tuple(name for name, _ in stage_shape(cfg))


def stage_shape(cfg: ExperimentConfig) -> StageShape:
    """The method's stages as the task graph needs them: name and what each yields."""
    return tuple((s.name, tuple(sorted(s.yields))) for s in build_method(cfg).stages)


def shared_data(cfg: ExperimentConfig) -> ExperimentConfig:
    """Pin data.seed so that every training seed of a sweep trains on the same dataset."""
    return apply(cfg, [f"data.seed={cfg.data_seed}"])


def method_overrides(base: ExperimentConfig, method: str) -> list[str]:
    """The switch from base's method to `method`, a registered method or a built-in variant (fedgr-robust:
    fedgr with its fixed params, `fedcore.methods.registry.VARIANTS`)."""
    variant = VARIANTS.get(method)
    if variant is not None:
        return [*method_overrides(base, variant.method), *variant.set]
    return method_switch(base.method.name, method)


def method_switch(base_method: str, method: str) -> list[str]:
    """The switch from `base_method` to another registered method. Its params would be rejected by
    the other's params model, and its stage budgets (`train.stage_rounds`) are its own: stage names
    such as `train` and `warmup` are shared, so a budget left in place would cut another method's."""
    return [] if method == base_method else [f"method.name={method}", "method.params={}", "train.stage_rounds={}"]


def sweep_axes(base: ExperimentConfig, spec: SweepSpec) -> tuple[list[str], list[int], dict[str, list[str]]]:
    """(methods, seeds, settings) of a sweep; empty parts of the spec take the config's own."""
    return (spec.methods or [base.method.name], spec.seeds or [base.seed],
            {k: list(v) for k, v in spec.settings.items()} or {noise_label(base): []})


def run_overrides(base: ExperimentConfig, setting: list[str] | tuple[str, ...], method: str,
                  seed: int, own: list[str] | tuple[str, ...] = ()) -> tuple[str, ...]:
    """The overrides that turn a sweep's base config into one (setting, method, seed) run; `own`
    (the method's SweepSpec.method_overrides) come after the method switch, which resets its params."""
    return (*setting, *method_overrides(base, method), *own, f"seed={seed}")


def plan_sweep(base: ExperimentConfig, spec: SweepSpec) -> list[SettingPlan]:
    """Settings x methods x seeds, each run's config validated; stages per method."""
    methods, seeds, settings = sweep_axes(base, spec)
    only = _check_setting_methods(spec.setting_methods, methods, settings)
    own = _check_method_overrides(spec.method_overrides, methods)
    plans = []
    for name, set_overrides in settings.items():
        set_cfg = apply(base, set_overrides)  # validated: a setting may switch dataset or model
        runs = []
        for method in methods:
            for seed in seeds:
                cfg = apply(base, run_overrides(base, set_overrides, method, seed, own.get(method, ())))
                # A variant row is named as the row, not its method: fedgr and fedgr-robust may share a sweep.
                name_ = run_name_for(cfg, method, name)
                runs.append(RunPlan(method, seed, stage_shape(cfg), name_))
        active = tuple(i for i, r in enumerate(runs) if name not in only or r.method in only[name])
        plans.append(SettingPlan(name, tuple(set_overrides), set_cfg.data_hash(), runs, active, own))
    _check_same_stages(plans)
    return plans


def _check_setting_methods(only: dict[str, list[str]], methods: list[str],
                           settings: dict[str, list[str]]) -> dict[str, list[str]]:
    for name, chosen in only.items():
        if name not in settings:
            raise ConfigError(f"setting_methods names setting '{name}', which the sweep does not have "
                              f"(settings: {', '.join(settings)})")
        unknown = [m for m in chosen if m not in methods]
        if not chosen or unknown:
            raise ConfigError(f"setting_methods['{name}'] must list some of the sweep's methods {methods}, "
                              f"got {chosen}")
    return only


def _check_method_overrides(own: dict[str, list[str]], methods: list[str]) -> dict[str, tuple[str, ...]]:
    unknown = [m for m in own if m not in methods]
    if unknown:
        raise ConfigError(f"method_overrides names {unknown}, which the sweep does not run (methods: {methods})")
    for m, over in own.items():
        check_own_overrides(m, over)
    return {m: tuple(o) for m, o in own.items()}


def check_own_overrides(method: str, over: Sequence[str]) -> None:
    """Refuse a method's own overrides that touch data, partition or noise (compile and run time)."""
    # The data is shared by every method of a setting, so a method may not change it.
    shared = [o for o in over if o.split("=", 1)[0].split(".", 1)[0] in ("data", "partition", "noise")]
    if shared:
        raise ConfigError(f"method_overrides['{method}'] changes the shared dataset ({', '.join(shared)}); "
                          "put data, partition and noise changes in a setting or --set")


def _check_same_stages(plans: list[SettingPlan]) -> None:
    # One loop body serves every setting, so a run's stages may not depend on the setting.
    first = [r.stages for r in plans[0].runs]
    for p in plans[1:]:
        if [r.stages for r in p.runs] != first:
            raise ConfigError(f"setting '{p.name}' changes the stages of a method; sweep it in its own pipeline")


def selected_overrides(spec: SweepSpec, base: ExperimentConfig, where: str = "the sweep file") -> list[str]:
    """The overrides that make `base` train one row of a sweep file at its setting (the retrain
    pipeline): the row named with --method (the spec's one method), else the file's `selected`."""
    if len(spec.methods) > 1:
        raise ConfigError(f"a retrain (or fedcore run) trains one method; {where} with --method names "
                          f"{spec.methods}: keep one")
    row = spec.methods[0] if spec.methods else spec.selected
    if not row:
        raise ConfigError(f"{where} has no selected method (fedcore bench writes `selected: METHOD`); "
                          f"pass --method with one of: {', '.join(spec.method_overrides) or 'a registered method'}")
    # A file of rows names what it tuned: a row it lacks would train at the config's own settings,
    # which no one asked for. Without rows (a retrain with --method alone) the method's defaults are meant.
    if spec.method_overrides and row not in spec.method_overrides and row != spec.selected:
        raise ConfigError(f"{where} has no row '{row}'; its rows: {', '.join(spec.method_overrides)}")
    method = row_method(spec, row)
    own = (spec.default_overrides if selected_setting(spec) == "default" else spec.method_overrides).get(row, [])
    check_own_overrides(row, own)
    return [*method_overrides(base, method), *own]


def selected_setting(spec: SweepSpec) -> str:
    """The setting a one-row run trains: the file's chosen one for its selected row, else the tuned one
    (a row named with --method, and files from before the bench chose among settings)."""
    return "default" if not spec.methods and spec.selected_setting == "default" else "tuned"


def one_row_overrides(base: ExperimentConfig, spec: SweepSpec | None, method: str | None,
                      where: str = "the sweep file") -> list[str]:
    """`fedcore run --method ROW [--sweep FILE]`: the overrides that make `base` train one row, a
    registered method or a built-in variant (its fixed params included), at the sweep file's tuned
    setting when one is given (its `selected` row when no --method)."""
    if spec is None:
        return [] if method is None else method_overrides(base, method)
    if method is not None:
        spec = spec.model_copy(update={"methods": [method]})
    return selected_overrides(spec, base, where)


def row_method(spec: SweepSpec, row: str) -> str:
    """What a sweep row switches to: the file's `selected_method` for its selected row (a grid's own
    variant: the row's overrides carry its fixed params), else the row, a registered method or a
    built-in variant (`method_overrides`)."""
    return spec.selected_method if row == spec.selected and spec.selected_method else row


def load_sweep_spec(path: str | Path | None, overrides: dict[str, Any] | None = None) -> SweepSpec:
    """A sweep YAML (methods, seeds, settings) plus CLI values, which win."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"sweep file '{p}' not found; pass a YAML with methods, seeds and settings")
        data = safe_yaml.load_file(p, "sweep file") or {}
        if not isinstance(data, dict):
            raise ConfigError(f"sweep file '{p}' must hold a mapping (methods, seeds, settings)")
    data.update({k: v for k, v in (overrides or {}).items() if v})
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise ConfigError(f"invalid sweep spec at '{loc}': {first['msg']}") from None
