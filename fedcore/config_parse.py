"""Reading an experiment config: YAML files and dicts, `a.b=value` overrides, paper aliases.

Checked against the schema (`fedcore.config`) only. Whether a name (data.name,
model.name, method.name) exists is the registries' business: `fedcore.registries.load_config`
parses here, then runs their one `validate(cfg)` step.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from fedcore import safe_yaml
from fedcore.config import ExperimentConfig, did_you_mean
from fedcore.errors import ConfigError


def _format_error(err: ValidationError, data: Any) -> str:
    where, msg, more = validation_problem(err, ExperimentConfig, data)
    extra = f" (and {more} more)" if more else ""
    return f"invalid config at '{where or 'config'}': {msg}{extra}"


def validation_problem(err: ValidationError, model: type[BaseModel], data: Any,
                       prefix: str = "") -> tuple[str, str, int]:
    """(dotted place, what is wrong, how many other places are wrong) of the first problem pydantic
    found validating `data` against `model`; `prefix` ('method.params.') is how the user spells
    `model`'s place. Places read as the user wrote them: pydantic's union tags ('forget_rate.float')
    are left out, and the tries of a union at one place are one problem ('a number or 'noise_rate'')."""
    by_place: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for e in err.errors():
        by_place.setdefault(_user_loc(e["loc"], data), []).append(e)
    loc, errors = next(iter(by_place.items()))
    return prefix + ".".join(str(p) for p in loc), _problem(loc, errors, model, prefix), len(by_place) - 1


def _user_loc(loc: tuple[Any, ...], data: Any) -> tuple[Any, ...]:
    """`loc` less the parts that name no key of `data`: a union member's tag (`float`,
    `literal['noise_rate']`, a model's class name). The last part stays when it is a key the user
    gave that the schema lacks, or one it needs that the user left out."""
    out, node = [], data
    for i, part in enumerate(loc):
        if isinstance(node, dict) and (part in node or i == len(loc) - 1):
            out.append(part)
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            out.append(part)
            node = node[part]
        elif not isinstance(node, dict):  # a value: what follows are tags of its union's members
            break
    return tuple(out)


def _problem(loc: tuple[Any, ...], errors: list[dict[str, Any]], model: type[BaseModel], prefix: str) -> str:
    first = errors[0]
    if first["type"] == "extra_forbidden":
        fields = _fields_at(model, loc[:-1])
        hint = did_you_mean(loc[-1], fields, prefix + "".join(f"{p}." for p in loc[:-1]))
        return f"unknown key{hint}" if hint else \
            "unknown key (check the spelling; `fedcore config show` lists valid keys)"
    if len(errors) > 1:  # a union's members, each refusing: one sentence of what would do
        wants = [e["msg"].removeprefix("Input should be ") for e in errors]
        msg = "Input should be " + " or ".join(dict.fromkeys(wants)) + f" (got {first['input']!r})"
    else:
        msg = first["msg"]
    choices = [c for e in errors if e["type"] == "literal_error"
               for c in re.findall(r"'([^']*)'", e.get("ctx", {}).get("expected", ""))]
    return msg + (did_you_mean(first["input"], choices) if choices and isinstance(first["input"], str) else "")


def _fields_at(model: type[BaseModel] | None, path: tuple[Any, ...]) -> list[str]:
    """The field names of the section at `path` under `model`; [] where the schema has no model."""
    for part in path:
        field = model.model_fields.get(str(part)) if model is not None else None
        model = _model_of(field.annotation) if field is not None else None
    return list(model.model_fields) if model is not None else []


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for a in get_args(annotation) if (m := _model_of(a)) is not None), None)


def _parse_value(raw: str) -> Any:
    try:
        return safe_yaml.loads(raw)
    except yaml.YAMLError:
        return raw


# Short names from the papers, accepted in YAML and overrides: (section, alias) -> field.
ALIASES = {("noise", "phi"): "noisy_client_fraction"}


def apply_overrides(data: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """Apply `a.b.c=value` overrides (values parsed as YAML) to a nested dict, in place.

    An alias in the key (`noise.phi`) sets its field, so it wins over the file's spelling.
    """
    for item in overrides or []:
        if "=" not in item:
            raise ConfigError(f"override '{item}' must look like key.path=value, e.g. noise.rate.max=0.9")
        key, raw = item.split("=", 1)
        parts = [p for p in key.strip().split(".") if p]
        if not parts:
            raise ConfigError(f"override '{item}' has an empty key; write it as key.path=value, e.g. train.rounds=5")
        if len(parts) == 2 and tuple(parts) in ALIASES:
            parts[1] = ALIASES[(parts[0], parts[1])]
        node = data
        for p in parts[:-1]:
            nxt = node.get(p)
            if nxt is None:
                nxt = node[p] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(f"override '{item}': '{p}' is a value, not a section")
            node = nxt
        node[parts[-1]] = _parse_value(raw)
    return data


def _normalize_aliases(data: dict[str, Any]) -> dict[str, Any]:
    for (section, alias), target in ALIASES.items():
        sec = data.get(section)
        if isinstance(sec, dict) and alias in sec:
            if target in sec:
                raise ConfigError(f"'{section}.{alias}' and '{section}.{target}' are the same setting; give only one")
            sec[target] = sec.pop(alias)
    return data


def _plain_copy(data: Any) -> dict[str, Any]:
    """A JSON-clean deep copy of a config dict; ConfigError for anything else."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"a config must be a mapping of sections (data, partition, noise, ...), "
                          f"not {type(data).__name__}")
    try:
        return json.loads(json.dumps(data, allow_nan=True))
    except (TypeError, ValueError, RecursionError) as err:
        raise ConfigError(f"the config holds something other than plain values ({err}); "
                          "use mappings, lists, strings, numbers and booleans") from None


def parse_config_dict(data: dict[str, Any], overrides: list[str] | None = None) -> ExperimentConfig:
    """A config from a dict plus dotted overrides, checked against the schema only.

    Names (data.name, model.name, method.name and its params) are checked by
    `fedcore.registries.validate`; `fedcore.registries.config_from_dict` does both.
    """
    data = _normalize_aliases(_plain_copy(data))
    data = _normalize_aliases(apply_overrides(data, overrides))
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_error(err, data)) from None


def parse_config(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read a YAML config file and apply dotted overrides, checked against the schema only.

    `fedcore.registries.load_config` also checks the names against the registries.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file '{p}' not found; pass a YAML file such as configs/quickstart.yaml")
    data = safe_yaml.load_file(p)
    if not isinstance(data, dict):
        # `[]`, `0` or `''` used to be read as "no settings" and ran on the defaults.
        raise ConfigError(f"config file '{p}' must hold a mapping of sections (data, partition, noise, ...)")
    return parse_config_dict(data, overrides)
