"""Loading a config: parse it (`fedcore.config`), then check its names in one `validate` step.

`fedcore.config` knows the schema: types, ranges, unknown keys. Which names exist is known
only by the registries: datasets (`fedcore.data.datasets`), models (`fedcore.models`) and
methods with their params (`fedcore.methods.registry`). They all import `fedcore.config`,
so the schema cannot ask them; this module sits above both and asks each registry.

Every command, component and sweep plan loads through `load_config` / `config_from_dict`,
so a typo in data.name, model.name, method.name or method.params fails at load, on the
laptop, not later in a pipeline task on the cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedcore.config import ExperimentConfig, parse_config, parse_config_dict
from fedcore.errors import ConfigError


def validate(cfg: ExperimentConfig) -> ExperimentConfig:
    """Refuse a data.name or model.name nothing is registered for, an unknown method.name, or
    method.params the method's params model rejects (ConfigError naming the choices); returns `cfg`."""
    # Imported on first use: the registries pull in torch, and `import fedcore.registries`
    # (pipeline definitions, `fedcore --help`) should not.
    from fedcore.data.datasets import available_datasets
    from fedcore.methods.registry import validate_method_config
    from fedcore.models import available_models

    validate_method_config(cfg)
    for key, name, known in (("data.name", cfg.data.name, available_datasets()),
                             ("model.name", cfg.model.name, available_models())):
        if name not in known:
            raise ConfigError(f"unknown {key} '{name}'; choose one of: {', '.join(known)}")
    return cfg


def load_config(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Load a YAML config file, apply dotted overrides, validate everything."""
    return validate(parse_config(path, overrides))


def config_from_dict(data: dict[str, Any], overrides: list[str] | None = None) -> ExperimentConfig:
    """A validated config from a dict (e.g. a config a pipeline task received) plus dotted overrides."""
    return validate(parse_config_dict(data, overrides))
