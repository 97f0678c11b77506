"""Config loading, overrides, validation, hashing, and CLI exit codes for bad input."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from fedcore.cli import app
from fedcore.config import ExperimentConfig
from fedcore.config_parse import apply_overrides
from fedcore.errors import ConfigError
from fedcore.registries import config_from_dict, load_config

runner = CliRunner()


def write(tmp_path, data, name="c.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return p


def test_overrides_parse_yaml_values():
    d = apply_overrides({}, ["noise.rate.max=0.9", "train.device=cpu", "noise.mixed_types=[symmetric]"])
    assert d == {"noise": {"rate": {"max": 0.9}, "mixed_types": ["symmetric"]}, "train": {"device": "cpu"}}


def test_round_trip_yaml_and_json_and_stable_hash(tmp_path):
    cfg = load_config("configs/quickstart.yaml", ["seed=3"])
    again = config_from_dict(yaml.safe_load(cfg.to_yaml()))
    assert again == cfg and again.config_hash() == cfg.config_hash()
    assert ExperimentConfig.model_validate(json.loads(cfg.to_json())) == cfg
    # Key order never changes the hash; tracking settings never do either.
    shuffled = dict(reversed(list(cfg.to_dict().items())))
    assert config_from_dict(shuffled).config_hash() == cfg.config_hash()
    assert load_config("configs/quickstart.yaml", ["seed=3", "tracking.experiment=x"]).config_hash() == \
        cfg.config_hash()
    assert load_config("configs/quickstart.yaml", ["seed=4"]).config_hash() != cfg.config_hash()


def test_phi_alias():
    cfg = config_from_dict({"noise": {"phi": 0.3}})
    assert cfg.noise.noisy_client_fraction == 0.3


def test_data_seed_decouples_dataset_from_training_seed():
    a = config_from_dict({"seed": 1, "data": {"seed": 0}})
    b = config_from_dict({"seed": 2, "data": {"seed": 0}})
    assert a.data_hash() == b.data_hash() and a.config_hash() != b.config_hash()


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["noise.phi=1.5"], "noise.noisy_client_fraction"),
        (["noise.rate.min=0.9", "noise.rate.max=0.5"], "noise.rate"),
        (["noise.rte.min=0.1"], "noise.rte"),
        (["partition.kind=bogus"], "partition.kind"),
        (["train.device=tpu"], "train.device"),
        (["method.name=nope"], "method.name"),
        (["method.name=fedprox", "method.params.muu=1"], "method.params.muu"),
        (["method.name=fedprox", "method.params.mu=-1"], "method.params.mu"),
        (["noise.num_noisy_clients=50"], "num_noisy_clients"),
        (["data.name=imagenet"], "data.name"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_field(tmp_path, overrides, field):
    args = ["data", "prepare", "configs/quickstart.yaml", "--out", str(tmp_path / "o")]
    for o in overrides:
        args += ["--set", o]
    from fedcore.cli import main

    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2


def test_cli_error_message_is_one_line_and_names_field(tmp_path, capsys):
    from fedcore.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["data", "prepare", "configs/quickstart.yaml", "--out", str(tmp_path / "o"), "--set", "noise.phi=1.5"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2
    assert len(err.splitlines()) == 1 and "noise.noisy_client_fraction" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()  # nothing written on bad input


@pytest.mark.parametrize(("argv", "message"), [
    (["methods"], "No such command 'methods'"),
    (["run", "configs/quickstart.yaml", "--bogus"], "No such option: --bogus"),
    # The config is optional since `fedcore run --resume RUN` reads the run's own; without either, one line.
    (["run"], "error: pass the experiment config"),
])
def test_usage_errors_exit_2_with_clicks_message_and_no_traceback(argv, message, capsys):
    from fedcore.cli import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and "Traceback" not in err


def test_misspelled_key_in_yaml_file(tmp_path, capsys):
    from fedcore.cli import main

    p = write(tmp_path, {"noise": {"typo": 1}})
    with pytest.raises(SystemExit) as exc:
        main(["config", "show", str(p)])
    assert exc.value.code == 2 and "noise.typo" in capsys.readouterr().err


@pytest.mark.parametrize("content, needle", [("a: [1, 2", "not valid YAML"), ("- 1\n- 2\n", "mapping")])
def test_bad_yaml_files(tmp_path, content, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(write(tmp_path, content))


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")


def test_bad_override_syntax():
    with pytest.raises(ConfigError, match="key.path=value"):
        config_from_dict({}, ["noequals"])


def test_config_show_prints_resolved_config():
    res = runner.invoke(app, ["config", "show", "configs/quickstart.yaml", "--set", "seed=9"])
    assert res.exit_code == 0
    shown = yaml.safe_load(res.stdout.split("# config_hash")[0])
    assert shown["seed"] == 9 and shown["train"]["device"] == "auto"


def test_method_params_are_listed_with_types_defaults_and_meaning():
    from fedcore.methods.registry import describe_params, summary_line

    rows = {r[0]: r for r in describe_params("fedprox")}
    assert rows["mu"] == ("mu", "float", "0.01", "proximal weight")
    assert summary_line("fedcorr").startswith("FedCorr:")
    assert [r[0] for r in describe_params("fedavg")] == []


def _choices(annotation) -> list[str]:
    """The values of a Literal, also inside `Literal[...] | None`."""
    from typing import Literal, get_args, get_origin

    if get_origin(annotation) is Literal:
        return [str(v) for v in get_args(annotation)]
    return [v for a in get_args(annotation) for v in _choices(a)]


def test_every_param_of_every_method_has_a_meaning_and_a_choice_lists_its_values():
    from fedcore.methods.registry import available_methods, describe_params, get_method

    for method in available_methods():
        rows = {r[0]: r for r in describe_params(method)}
        for key, field in get_method(method).params.model_fields.items():
            _, kind, _, meaning = rows[key]
            assert meaning.strip(), f"{method}: method.params.{key} has no meaning"
            if choices := _choices(field.annotation):
                assert "one of: " + ", ".join(choices) in kind, (method, key, kind)
            assert "Literal" not in kind, (method, key, kind)


def test_config_methods_prints_choices_and_meanings_as_written(capsys):
    from fedcore.cli import main

    main(["config", "methods", "fedrg"])
    out = capsys.readouterr().out
    assert "one of: paper, code, posterior" in out and "Literal" not in out
    assert "<gamma, B[y]>" in out  # a meaning, not rich markup to swallow
    assert "starting weight of the mixture's" in out  # pi0, once without a meaning


def test_config_methods_cli_lists_methods_and_rejects_unknown_ones(capsys):
    from fedcore.cli import main
    from fedcore.methods.registry import available_methods

    main(["config", "methods"])
    out = capsys.readouterr().out
    assert all(m in out for m in available_methods())
    main(["config", "methods", "fedgr"])
    assert "tau_conf" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["config", "methods", "bogus"])
    assert exc.value.code == 2 and "unknown method 'bogus'" in capsys.readouterr().err


def test_a_stage_budget_of_another_method_is_inert_but_a_typo_is_refused():
    # One FedRG preset serves the baselines and the no-SSL ablation: 'pretrain' is FedRG's stage.
    for overrides in (["method.name=fedavg", "method.params={}"], ["method.params.ssl_pretrain=false"]):
        cfg = load_config("configs/fmnist/fedrg_sym_localized.yaml", overrides)
        assert cfg.train.stage_rounds == {"pretrain": 10}
    with pytest.raises(ConfigError, match="method 'fedavg' has no stage 'pretrian'"):
        load_config("configs/quickstart.yaml", ["train.stage_rounds.pretrian=3"])


@pytest.mark.parametrize("method,field,word", [("fedgr", "ema_ramp", "off"), ("fedrg", "absorption", "off"),
                                               ("fedrg", "absorption", "on")])
def test_bare_on_off_in_yaml_reach_a_choice_param_as_words(method, field, word):
    # YAML 1.1 reads `off` / `on` as booleans; a choice param offering the word must still get it,
    # from an override and from a YAML file alike.
    from fedcore.methods.registry import validate_method_config

    cfg = load_config("configs/quickstart.yaml", [f"method.name={method}", f"method.params.{field}={word}"])
    assert getattr(validate_method_config(cfg), field) == word
    cfg = config_from_dict(yaml.safe_load(f"method: {{name: {method}, params: {{{field}: {word}}}}}"))
    assert getattr(validate_method_config(cfg), field) == word


def test_a_boolean_is_still_refused_where_the_choice_has_no_such_word():
    with pytest.raises(ConfigError, match="method.params.ema_ramp"):
        load_config("configs/quickstart.yaml", ["method.name=fedgr", "method.params.ema_ramp=on"])
    with pytest.raises(ConfigError, match="method.params.absorption"):
        load_config("configs/quickstart.yaml", ["method.name=fedrg", "method.params.absorption=sometimes"])


@pytest.mark.parametrize("override,where", [("model.params.norm=.inf", "model.params"),
                                            ("data.params.a=[1, -.inf]", "data.params")])
def test_free_form_params_refuse_non_finite_numbers(override, where):
    # The params dicts hold Any, which allow_inf_nan does not reach; an inf used to be kept and
    # written back by to_yaml as null (found by the config fuzz test).
    with pytest.raises(ConfigError, match=rf"'{where}'.* must be a finite number"):
        load_config("configs/quickstart.yaml", [override])
    cfg = load_config("configs/quickstart.yaml", ["model.params.norm=group", "data.params.split_seed=3"])
    assert config_from_dict(yaml.safe_load(cfg.to_yaml())) == cfg
