"""Method registry: `@register("name", params=ParamsModel)` on a method class.

Methods are discovered by importing every module in `fedcore.methods`, so adding a
method is adding one file. No `if name == ...` chains anywhere.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fedcore.config import did_you_mean
from fedcore.config_parse import validation_problem
from fedcore.errors import ConfigError

if TYPE_CHECKING:
    from fedcore.config import ExperimentConfig


class MethodParams(BaseModel):
    """Base for method params: unknown keys are rejected like everywhere else in the config, and
    so are NaN and infinite floats."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _yaml_switches(cls, data: Any) -> Any:
        # YAML 1.1 reads a bare `off` / `on` as a boolean (`ema_ramp: off` in a file, or
        # `-s method.params.ema_ramp=off`), so a choice field offering those words gets them back.
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for name, field in cls.model_fields.items():
            v = out.get(name)
            if isinstance(v, bool) and get_origin(field.annotation) is Literal:
                word = "on" if v else "off"
                if word in get_args(field.annotation):
                    out[name] = word
        return out


@dataclass(frozen=True)
class MethodSpec:
    name: str
    cls: type
    params: type[MethodParams]


_REGISTRY: dict[str, MethodSpec] = {}
_NOT_METHODS = {"base", "registry", "common"}


def register(name: str, params: type[MethodParams] = MethodParams):
    def deco(cls: type) -> type:
        if name in _REGISTRY and _REGISTRY[name].cls is not cls:
            raise ValueError(f"method '{name}' registered twice")
        _REGISTRY[name] = MethodSpec(name, cls, params)
        cls.name = name
        return cls

    return deco


def _discover() -> None:
    import fedcore.methods as pkg  # lazy: the package itself, read at discovery

    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name not in _NOT_METHODS and not info.name.startswith("_"):
            importlib.import_module(f"fedcore.methods.{info.name}")


def available_methods() -> list[str]:
    _discover()
    return sorted(_REGISTRY)


def get_method(name: str) -> MethodSpec:
    _discover()
    if name not in _REGISTRY:
        raise ConfigError(f"unknown method '{name}' at 'method.name'{did_you_mean(name, _REGISTRY)}; choose one "
                          f"of {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def parse_params(spec: MethodSpec, raw: dict[str, Any]) -> MethodParams:
    try:
        return spec.params.model_validate(raw)
    except ValidationError as err:
        where, msg, _ = validation_problem(err, spec.params, raw, "method.params.")
        raise ConfigError(f"invalid config at '{where}': {msg} (method '{spec.name}')") from None


def validate_method_config(cfg: ExperimentConfig) -> MethodParams:
    spec = get_method(cfg.method.name)
    return parse_params(spec, cfg.method.params)


def build_method(cfg: ExperimentConfig) -> Any:
    """Instantiate the configured method with validated params."""
    spec = get_method(cfg.method.name)
    return spec.cls(cfg, parse_params(spec, cfg.method.params))


def describe_params(name: str) -> list[tuple[str, str, str, str]]:
    """(param, type, default, description) rows of a method's params model, in declaration order."""
    rows = []
    for key, field in get_method(name).params.model_fields.items():
        default = "required" if field.is_required() else repr(field.get_default(call_default_factory=True))
        rows.append((key, type_text(field.annotation), default, field.description or ""))
    return rows


def type_text(annotation: Any) -> str:
    """A param's type as a user reads it: a choice lists its values ('one of: sce, ce'), an
    optional one says 'or None', anything else is its name ('float')."""
    if get_origin(annotation) is Literal:
        return "one of: " + ", ".join(str(v) for v in get_args(annotation))
    if get_origin(annotation) in (Union, types.UnionType):
        parts = [a for a in get_args(annotation) if a is not type(None)]
        text = " | ".join(type_text(a) for a in parts)
        return f"{text} or None" if len(parts) < len(get_args(annotation)) else text
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def summary_line(name: str) -> str:
    """The first line of a method's module docstring (method and paper)."""
    doc = sys.modules[get_method(name).cls.__module__].__doc__ or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


class Variant(BaseModel):
    """A named row of a bench grid or sweep: a registered method with fixed params."""

    model_config = ConfigDict(extra="forbid")
    method: str = Field(description="the registered method this row runs")
    set: list[str] = Field(default_factory=list, description="its fixed params, e.g. method.params.profile=robust")


# Spec v3's reading of FedHarmony (experiments/fedharmony.sh, lam 0.1 as picked there on validation).
HARMONY_V3 = ["method.params.timing=start", "method.params.teacher=pooled", "method.params.weighting=abs",
              "method.params.diagonal=true", "method.params.scale=sum", "method.params.lam_schedule=caa",
              "method.params.gamma_by=median", "method.params.mask_unannotated=true", "method.params.lam=0.1"]
# The named rows of lab/results/tuning.md (lab/grids/fmnist_*.yaml): the
# grids and `fedcore pipeline --sweep` name them like methods.
VARIANTS = {"fedgr-robust": Variant(method="fedgr", set=["method.params.profile=robust"]),
            "fedharmony-v3": Variant(method="fedharmony", set=HARMONY_V3)}
