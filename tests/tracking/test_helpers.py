"""Pure helpers: config flattening, run names, tags, params."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fedcore import __version__
from fedcore.config import ExperimentConfig
from fedcore.tracking import base
from fedcore.tracking.base import flatten_config, run_name_for, run_params, standard_tags


def make_cfg(**sections) -> ExperimentConfig:
    return ExperimentConfig.model_validate(sections)


def test_flatten_uses_dotted_keys_and_json_for_non_strings():
    cfg = make_cfg(method={"name": "fedgr", "params": {"lam": 0.1, "stages": {"warm": 5}}})

    flat = flatten_config(cfg)

    assert flat["method.name"] == "fedgr"
    assert flat["method.params.lam"] == "0.1"
    assert flat["method.params.stages.warm"] == "5"
    assert flat["train.lr"] == "0.05"
    assert flat["data.root"] == "null"
    assert flat["train.memorization"] == "true"
    assert flat["noise.mixed_types"] == '["symmetric", "pairflip", "asymmetric"]'
    assert flat["train.stage_rounds"] == "{}"
    assert flat["seed"] == "0"
    assert all(isinstance(v, str) for v in flat.values())


def test_flatten_leaves_out_tracking_so_resumed_runs_keep_identical_params():
    first = make_cfg(tracking={"backend": "mlflow"})
    resumed = make_cfg(tracking={"backend": "mlflow", "run_id": "abc", "run_name": "x"})

    assert flatten_config(first) == flatten_config(resumed)
    assert not [k for k in flatten_config(first) if k.startswith("tracking")]


def test_flatten_truncates_values_to_mlflow_limit():
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

    cfg = make_cfg(method={"name": "fedavg", "params": {"blob": "x" * 10_000}})

    value = flatten_config(cfg)["method.params.blob"]

    assert base.MAX_PARAM_VALUE_LENGTH == MAX_PARAM_VAL_LENGTH
    assert len(value) == MAX_PARAM_VAL_LENGTH
    assert value.endswith("...")


@pytest.mark.parametrize(
    ("sections", "expected"),
    [
        ({}, "fedavg · sym 0.4 · seed 0"),
        (
            {"method": {"name": "fedgr"}, "noise": {"rate": {"kind": "uniform", "min": 0.5, "max": 1.0}}},
            "fedgr · sym U(0.5,1.0) · seed 0",
        ),
        (
            {
                "method": {"name": "fedsir"},
                "seed": 3,
                "noise": {"type": "pairflip", "scope": "localized", "rate": {"kind": "linspace", "max": 0.8}},
            },
            "fedsir · pair lin(0.0,0.8) localized · seed 3",
        ),
        (
            {"noise": {"type": "asymmetric", "rate": {"kind": "fedcorr", "rho": 0.6, "tau": 0.5}}},
            "fedavg · asym fedcorr(0.6,0.5) · seed 0",
        ),
        ({"noise": {"type": "mixed", "rate": {"value": 0.25}}}, "fedavg · mixed 0.25 · seed 0"),
        ({"noise": {"type": "real"}, "seed": 2}, "fedavg · real · seed 2"),
        ({"noise": {"type": "none"}, "method": {"name": "fedprox"}}, "fedprox · none · seed 0"),
        ({"noise": {"type": "missing", "rate": {"value": 1 / 3}}}, "fedavg · missing 0.3333 · seed 0"),
    ],
)
def test_run_name_for(sections, expected):
    assert run_name_for(make_cfg(**sections)) == expected


def test_a_sweep_runs_name_starts_as_the_consoles_row_does():
    """The console's table labels a pipeline's row `fedsir · default` (row · setting): MLflow's child run
    name starts the same, then says the noise and the seed; a setting named as its noise is not repeated."""
    cfg = make_cfg(method={"name": "fedgr"}, noise={"rate": {"kind": "uniform", "min": 0.7, "max": 1.0}})
    assert run_name_for(cfg, "fedgr-robust", "default") == "fedgr-robust · default · sym U(0.7,1.0) · seed 0"
    assert run_name_for(cfg, None, "sym U(0.7,1.0)") == "fedgr · sym U(0.7,1.0) · seed 0"


def test_standard_tags():
    cfg = make_cfg(
        data={"name": "cifar10"},
        method={"name": "fedrg"},
        partition={"kind": "shards"},
        noise={"type": "pairflip", "scope": "localized"},
    )

    assert standard_tags(cfg) == {
        "method": "fedrg",
        "dataset": "cifar10",
        "noise_type": "pairflip",
        "noise_scope": "localized",
        "partition": "shards",
        "config_hash": cfg.config_hash(),
    }


def test_run_params_adds_provenance(monkeypatch):
    monkeypatch.setenv("FEDCORE_GIT_COMMIT", "0123abcd")
    cfg = make_cfg(seed=4)

    params = run_params(cfg, "f" * 64)

    assert params["config_hash"] == cfg.config_hash()
    assert params["data_sha256"] == "f" * 64
    assert params["fedcore_version"] == __version__
    assert params["git_commit"] == "0123abcd"
    assert params["seed"] == "4"


def test_run_params_without_data_checksum_or_git(monkeypatch):
    monkeypatch.delenv("FEDCORE_GIT_COMMIT", raising=False)
    monkeypatch.setattr(base, "_git_head", lambda: None)

    params = run_params(make_cfg(), None)

    assert params["data_sha256"] == "unknown"
    assert params["git_commit"] == "unknown"


def test_git_head_reads_the_fedcore_checkout():
    base._git_head.cache_clear()
    expected = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=base.__file__.rsplit("/", 1)[0], capture_output=True, text=True
    ).stdout.strip()

    assert base._git_head() == (expected or None)


def test_importing_tracking_does_not_import_mlflow():
    code = "import sys, fedcore.tracking, fedcore.tracking.callback; print('mlflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout

    assert out.strip() == "False"
