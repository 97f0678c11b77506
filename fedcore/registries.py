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

from fedcore.config import ExperimentConfig, did_you_mean
from fedcore.config_parse import parse_config, parse_config_dict
from fedcore.data.datasets import available_datasets, dataset_params, reads_root
from fedcore.errors import ConfigError
from fedcore.methods.registry import available_methods, build_method, validate_method_config
from fedcore.models import available_models


def validate(cfg: ExperimentConfig) -> ExperimentConfig:
    """Refuse a data.name or model.name nothing is registered for, an unknown method.name,
    method.params the method's params model rejects, data.params the dataset does not read, or
    a train.stage_rounds key that is not a stage of the method (ConfigError naming the choices);
    returns `cfg`."""
    validate_method_config(cfg)
    for key, name, known in (("data.name", cfg.data.name, available_datasets()),
                             ("model.name", cfg.model.name, available_models())):
        if name not in known:
            raise ConfigError(f"unknown {key} '{name}'{did_you_mean(name, known)}; choose one of: {', '.join(known)}")
    reads = dataset_params(cfg.data.name)
    unknown = sorted(set(cfg.data.params) - reads) if reads is not None else []
    if unknown:
        hint = did_you_mean(unknown[0], reads, "data.params.")
        raise ConfigError(f"{cfg.data.name}: unknown data.params {unknown}{hint}; valid: {sorted(reads)}")
    _check_stage_rounds(cfg)
    return cfg


def _check_stage_rounds(cfg: ExperimentConfig) -> None:
    """Every train.stage_rounds key must name a stage of the method."""
    if not cfg.train.stage_rounds:
        return

    # Some stages exist only with a budget (DivideMix's warmup, FedCorr's finetune): ask with
    # every named stage given one round, so that naming such a stage with 0 rounds stays valid.
    probe = cfg.model_copy(update={"train": cfg.train.model_copy(
        update={"stage_rounds": {k: max(v, 1) for k, v in cfg.train.stage_rounds.items()}})})
    names = [s.name for s in build_method(probe).stages]
    foreign = [k for k in cfg.train.stage_rounds if k not in names]
    # A stage of another method (or of this one with other params, e.g. FedRG without SSL) is
    # inert here, so one preset serves every method and ablation; only names no method has are typos.
    known = _stage_names_of_every_method(probe) if foreign else set()
    for key in foreign:
        if key not in known:
            raise ConfigError(f"invalid config at 'train.stage_rounds.{key}': method '{cfg.method.name}' has no "
                              f"stage '{key}'{did_you_mean(key, names)}; its stages are {names}")


def _stage_names_of_every_method(cfg: ExperimentConfig) -> set[str]:
    out: set[str] = set()
    for name in available_methods():
        other = cfg.model_copy(update={"method": cfg.method.model_copy(update={"name": name, "params": {}})})
        try:
            out.update(s.name for s in build_method(other).stages)
        except ConfigError:
            continue
    return out


def _file_datasets(cfg: ExperimentConfig) -> str:
    return ", ".join(n for n in available_datasets() if reads_root(cfg.data.model_copy(update={"name": n})))


def check_data_root(cfg: ExperimentConfig) -> ExperimentConfig:
    """Refuse a data.root the dataset never reads (digits comes from scikit-learn): it was ignored
    without a word, so a user who pointed it at their own files trained on the bundled ones.

    Called where a user's config and --set arrive (load_config, `fedcore pipeline`), not in
    `validate`: a pipeline task's config may carry a root its dataset reads only with the snapshot
    (check_snapshot_root refuses the others).
    """
    if cfg.data.root and not reads_root(cfg.data):
        raise ConfigError(f"data.root '{cfg.data.root}' is set, but dataset '{cfg.data.name}' is bundled (built "
                          f"from scikit-learn's digits) and reads no files; drop data.root, or choose a dataset "
                          f"read from files ({_file_datasets(cfg)})")
    return cfg


def check_snapshot_root(cfg: ExperimentConfig, prefix: str) -> None:
    """Refuse a retrain's data prefix for a dataset that reads no files: each snapshot would become a
    data.root it ignores, and 'retrain on the newest data' would train on the bundled data again."""
    if prefix and not reads_root(cfg.data.model_copy(update={"root": prefix})):
        raise ConfigError(f"data prefix '{prefix}': dataset '{cfg.data.name}' is bundled and reads no files, so "
                          f"its snapshots would be ignored; retrain without a data prefix, or on a dataset read "
                          f"from files ({_file_datasets(cfg)})")


def load_config(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Load a YAML config file, apply dotted overrides, validate everything, and refuse a data.root
    the dataset does not read."""
    return check_data_root(validate(parse_config(path, overrides)))


def config_from_dict(data: dict[str, Any], overrides: list[str] | None = None) -> ExperimentConfig:
    """A validated config from a dict (e.g. a config a pipeline task received) plus dotted overrides."""
    return validate(parse_config_dict(data, overrides))
