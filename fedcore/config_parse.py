"""Reading an experiment config: YAML files and dicts, `a.b=value` overrides, paper aliases.

Checked against the schema (`fedcore.config`) only. Whether a name (data.name,
model.name, method.name) exists is the registries' business: `fedcore.registries.load_config`
parses here, then runs their one `validate(cfg)` step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from fedcore import safe_yaml
from fedcore.config import ExperimentConfig
from fedcore.errors import ConfigError


def _format_error(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "config"
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown key (check the spelling; `fedcore config show` lists valid keys)"
    extra = f" (and {len(err.errors()) - 1} more)" if len(err.errors()) > 1 else ""
    return f"invalid config at '{loc}': {msg}{extra}"


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
        raise ConfigError(_format_error(err)) from None


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
