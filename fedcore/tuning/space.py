"""Search spaces, read from where the defaults live.

A field is tunable when its pydantic Field carries `json_schema_extra=tune_range(low, high, log)`
(`fedcore.config.tune_range`): the train section declares lr, momentum and weight decay, and each
method's params class its own few. This module only reads them and never names a method, so a
method gets tuned by declaring a range beside its default, nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from fedcore.config import ExperimentConfig, TrainConfig
from fedcore.errors import ConfigError
from fedcore.methods.registry import get_method, validate_method_config
from fedcore.reporting.config_diff import flatten


@dataclass(frozen=True)
class Dim:
    """One tunable value: its dotted config path, range, scale, and whether it is an integer."""

    path: str
    low: float
    high: float
    log: bool = False
    integer: bool = False

    def describe(self) -> str:
        kind = "int" if self.integer else "float"
        return f"{kind} in [{self.low:g}, {self.high:g}]{' (log)' if self.log else ''}"


def declared(model: type[BaseModel], optimizer: str | None = None) -> dict[str, Dim]:
    """The tunable fields of a pydantic model, by field name (paths are filled in by the caller);
    `optimizer` picks a field's per-optimizer range where it declares one (and drops a field that
    is not tuned under that optimizer)."""
    out = {}
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        spec = extra.get("tune")
        if not spec:
            continue
        per = spec.get("by_optimizer") or {}
        if optimizer in per:
            if per[optimizer] is None:
                continue
            spec = {**spec, "low": per[optimizer][0], "high": per[optimizer][1]}
        integer = field.annotation is int or (isinstance(field.get_default(), int)
                                              and not isinstance(field.get_default(), bool)
                                              and isinstance(spec["low"], int) and isinstance(spec["high"], int))
        out[name] = Dim(name, spec["low"], spec["high"], bool(spec.get("log")), integer)
    return out


def full_space(cfg: ExperimentConfig) -> list[Dim]:
    """Every declared dimension for this config: train.* first, then method.params.*."""
    dims = [Dim(f"train.{d.path}", d.low, d.high, d.log, d.integer)
            for d in declared(TrainConfig, cfg.train.optimizer).values()]
    dims += [Dim(f"method.params.{d.path}", d.low, d.high, d.log, d.integer)
             for d in declared(get_method(cfg.method.name).params).values()]
    return dims


def search_space(cfg: ExperimentConfig, only: list[str] | None = None) -> list[Dim]:
    """The dimensions a tune explores: all declared ones, or the `only` paths among them (a path
    may drop its section: 'lr' means 'train.lr', 'mu' means 'method.params.mu')."""
    dims = full_space(cfg)
    if not only:
        return dims
    by_path = {d.path: d for d in dims}
    chosen = []
    for p in only:
        match = by_path.get(p) or by_path.get(f"train.{p}") or by_path.get(f"method.params.{p}")
        if match is None:
            raise ConfigError(f"'{p}' is not tunable for method '{cfg.method.name}'; choose from "
                              f"{', '.join(by_path) or 'nothing'} (see `fedcore config methods {cfg.method.name}`)")
        chosen.append(match)
    return chosen


def suggest(trial: Any, dims: list[Dim]) -> dict[str, float | int]:
    """Draw one point from an Optuna trial: {path: value}."""
    out: dict[str, float | int] = {}
    for d in dims:
        if d.integer:
            out[d.path] = trial.suggest_int(d.path, int(d.low), int(d.high), log=d.log)
        else:
            out[d.path] = trial.suggest_float(d.path, float(d.low), float(d.high), log=d.log)
    return out


def as_overrides(values: dict[str, Any]) -> list[str]:
    """{path: value} as `--set` overrides, floats with full precision (repr round-trips)."""
    return [f"{k}={v!r}" for k, v in values.items()]


def default_point(cfg: ExperimentConfig, dims: list[Dim]) -> dict[str, float | int]:
    """The config's own values of the dims, {path: value}: the point a tune started at its default tries
    first, so that its best can only be this setting or one that beat it on the tuning seed's validation.
    A value outside its range is refused: the sampler would have to score a point it can never draw."""
    # method.params holds only what the config sets; the method's params class has the rest.
    values = flatten({**cfg.model_dump(), "method": {"params": validate_method_config(cfg).model_dump()}})
    out: dict[str, float | int] = {}
    for d in dims:
        value = values[d.path]
        if not d.low <= value <= d.high:
            raise ConfigError(f"--start-at-default: {d.path}={value:g} lies outside its tune range "
                              f"{d.describe()}; set it inside (--set {d.path}=...) or leave out --start-at-default")
        out[d.path] = int(value) if d.integer else float(value)
    return out
