"""Bad input through `fedcore` itself (`cli.main`): one line on stderr, exit code 2, nothing lost.

Cases that need a prepared run or artifact live next to their subject (tests/engine/test_run.py,
tests/data/test_federated.py, tests/deploy/test_cli.py); these need only configs/.
"""

from __future__ import annotations

import pytest

from fedcore import cli

CONFIG = "configs/quickstart.yaml"


def _fails(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in captured.err
    return err


def test_unknown_show_format_is_refused(capsys):
    # It used to print JSON for any value but 'yaml'.
    assert "pass --format yaml or --format json" in _fails(["config", "show", CONFIG, "--format", "xml"], capsys)


def test_override_with_an_empty_key_says_how_to_write_one(capsys):
    assert "write it as key.path=value" in _fails(["config", "show", CONFIG, "--set", "=3"], capsys)


@pytest.mark.parametrize("content", [
    "[1, 2]",
    '{"method": "fedavg", "summary": null}',
    '{"method": "fedavg", "summary": {"final/acc": "high"}}',
])
def test_compare_on_a_malformed_metrics_file(tmp_path, capsys, content):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text(content)
    err = _fails(["compare", str(run)], capsys)
    assert err == f"error: '{run / 'metrics.json'}' is corrupt; re-run the experiment"
    assert (run / "metrics.json").read_text() == content


def test_data_root_with_an_unsupported_scheme(tmp_path, capsys):
    out = tmp_path / "art"
    err = _fails(["data", "prepare", CONFIG, "--set", "data.name=mnist", "--set", "data.root=gs://bucket/mnist",
                  "--out", str(out)], capsys)
    assert "data.root 'gs://bucket/mnist' has an unsupported scheme; use a local dir or s3://" in err
    assert not out.exists()


@pytest.mark.parametrize("argv", [
    ["run", CONFIG, "--no-progress"],
    ["data", "prepare", CONFIG],
    ["config", "show", CONFIG],
    ["pipeline", "compile", "experiment", CONFIG],
])
@pytest.mark.parametrize("name", ["digits", "digits_mosaic"])
def test_data_root_for_a_bundled_dataset_is_refused(tmp_path, capsys, argv, name):
    # It was ignored without a word: digits comes from scikit-learn and reads no files (issue 53, defect 7).
    out = tmp_path / "out"
    err = _fails([*argv, "--set", f"data.name={name}", "--set", "data.root=s3://bucket/digits",
                  *(["--out", str(out)] if argv[0] != "config" else [])], capsys)
    assert f"data.root 's3://bucket/digits' is set, but dataset '{name}' is bundled" in err
    assert not out.exists()


def test_data_root_is_refused_for_scenes_on_digit_tiles_only(capsys):
    from fedcore.registries import load_config

    fmnist = load_config(CONFIG, ["data.name=scenes_mosaic", "data.params.tiles=fashion_mnist",
                                  "data.root=/data/fmnist"])
    assert fmnist.data.root == "/data/fmnist"
    err = _fails(["config", "show", CONFIG, "--set", "data.name=scenes_mosaic", "--set", "data.root=/data/x"],
                 capsys)
    assert "dataset 'scenes_mosaic' is bundled" in err


def test_run_data_with_an_unsupported_scheme_leaves_no_run_dir(tmp_path, capsys):
    out = tmp_path / "run"
    err = _fails(["run", CONFIG, "--data", "gs://bucket/art", "--out", str(out), "--no-progress"], capsys)
    assert "'gs://bucket/art' has an unsupported scheme" in err
    assert not out.exists()


def test_pipeline_compile_out_onto_a_folder(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("kept")
    err = _fails(["pipeline", "compile", "experiment", CONFIG, "--out", str(tmp_path)], capsys)
    assert "is a folder; pass a file path" in err
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]  # no temp package left behind
    assert (tmp_path / "keep.txt").read_text() == "kept"


def test_pipeline_run_out_onto_a_file(tmp_path, capsys):
    mine = tmp_path / "notes.txt"
    mine.write_text("keep me")
    err = _fails(["pipeline", "run", "experiment", CONFIG, "--local", "--out", str(mine)], capsys)
    assert "is a file; pass a folder for the pipeline's run dir" in err
    assert mine.read_text() == "keep me"


def test_a_failed_local_pipeline_names_the_tasks_own_error(tmp_path):
    """`pipeline run --local` surfaces the task's one-line fedcore error, not only kfp's "Inner task failed"."""
    from pipelines.runner import task_error

    log = tmp_path / "kfp-local.log"
    assert task_error(log) is None  # no log yet (the run died before any task)
    log.write_text(
        "    raise DataError(f\"data.root '{root}' is not a directory\")\n"
        "    fedcore.errors.ConfigError: an earlier task's error\n"
        "    fedcore.errors.DataError: data.root '/nope' is not a directory; it should hold MNIST/raw/...\n"
        "    \n"
        "20:53:40.953 - ERROR - Task \x1b[96m'prepare-data'\x1b[0m finished with status \x1b[91mFAILURE\x1b[0m\n"
    )
    assert task_error(log) == "data.root '/nope' is not a directory; it should hold MNIST/raw/..."
    # Only this run's part of the (appended) log counts: an earlier run's error is not reported again.
    assert task_error(log, start=log.stat().st_size) is None
    log.write_text("Task 'train' finished with status FAILURE\nRuntimeError: CUDA out of memory\n")
    assert task_error(log) is None  # not a fedcore error: the message keeps pointing at the log only


def test_unknown_dataset_or_model_fails_before_a_config_is_shipped(tmp_path, capsys):
    """A typo in data.name / model.name must not first surface in a pipeline task on the cluster."""
    err = _fails(["config", "show", CONFIG, "--set", "model.name=resnet19"], capsys)
    assert "unknown model.name 'resnet19'" in err and "resnet18" in err
    out = tmp_path / "p.yaml"
    err = _fails(["pipeline", "compile", "experiment", CONFIG, "--set", "data.name=mnsit", "--out", str(out)], capsys)
    assert "unknown data.name 'mnsit'" in err and "mnist" in err
    assert not out.exists()


def test_a_sweep_setting_with_an_unknown_dataset_is_refused_at_plan_time():
    from fedcore.errors import ConfigError
    from fedcore.pipeline.plan import SweepSpec, plan_sweep
    from fedcore.registries import load_config

    spec = SweepSpec(methods=["fedavg"], seeds=[0], settings={"bad": ["data.name=cifar11"]})
    with pytest.raises(ConfigError, match="unknown data.name 'cifar11'"):
        plan_sweep(load_config(CONFIG), spec)


# Issue 19's hostile configs: each is refused in one line that says what is wrong (exit 2).
HOSTILE_FILES = [
    ("latin-1", "seed: 1\nrun_name: caf\xe9\n".encode("latin-1"), "is not UTF-8 text (byte 21 is not UTF-8)"),
    ("utf-16", "seed: 1\n".encode("utf-16"), "is not UTF-8 text (it is UTF-16 text); save it as UTF-8"),
    ("date", b"seed: 2024-01-01\n", "invalid config at 'seed': Input should be a valid integer"),
    ("binary", b"tracking:\n  run_name: !!binary aGVsbG8=\n", "at line 2: the tag '!!binary' is not allowed"),
    ("set", b"method:\n  params: !!set {a, b}\n", "the tag '!!set' is not allowed"),
    ("circular", b"data: &a\n  params: *a\n", "an alias refers to the mapping or list that contains it"),
    ("deep", b"data:\n  params:\n    x: " + b"[" * 300 + b"]" * 300 + b"\n", "nesting deeper than 64 levels"),
    ("empty list", b"[]\n", "must hold a mapping of sections"),
    ("zero", b"0\n", "must hold a mapping of sections"),
    ("empty string", b"''\n", "must hold a mapping of sections"),
    ("duplicate", b"seed: 1\nseed: 2\n", "at line 2: the key 'seed' appears twice in one mapping"),
    ("phi twice", b"noise:\n  phi: 0.5\n  noisy_client_fraction: 0.7\n",
     "'noise.phi' and 'noise.noisy_client_fraction' are the same setting; give only one"),
    ("bool count", b"partition:\n  num_clients: true\n", "'partition.num_clients': Input should be a valid integer"),
    ("float width", b"model:\n  width: 1.0e+12\n", "'model.width': Input should be a valid integer"),
    ("billion laughs", ("\n".join(['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
                                  + [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)])
                        + "\n").encode(), "more than 100000 values once its aliases are expanded"),
]
HOSTILE_OVERRIDES = [
    ("train.lr=.inf", "'train.lr': Input should be a finite number"),
    ("train.lr=1e308", "'train.lr': Input should be less than or equal to 10"),
    ("seed=100000000000000000000000", "'seed': Input should be less than or equal to 2147483647"),
    ("train.stage_rounds.bogus=3", "'train.stage_rounds.bogus': method 'fedavg' has no stage 'bogus'"),
    ("train.stage_rounds.train=-4", "'train.stage_rounds.train': Input should be greater than or equal to 0"),
    ("data.params.bogus=1", "digits: unknown data.params ['bogus']; valid: ['split_seed']"),
    ("train.local_epochs=0", "'train.local_epochs': Input should be greater than or equal to 1"),
    ("method.params.mu=.nan", "'method.params.mu': Input should be a finite number"),
    # Issue 71: the nearest key or value (difflib) for a typo.
    ("train.round=3", "'train.round': unknown key (did you mean 'train.rounds'?)"),
    ("noise.type=symetric", "'noise.type': Input should be 'none', 'symmetric'"),
    ("noise.type=symetric", "(did you mean 'symmetric'?)"),
    ("data.name=digts", "unknown data.name 'digts' (did you mean 'digits'?); choose one of"),
    ("method.params.muu=0.1", "'method.params.muu': unknown key (did you mean 'method.params.mu'?)"),
    ("train.stage_rounds.trian=3", "has no stage 'trian' (did you mean 'train'?)"),
]


@pytest.mark.parametrize(("name", "content", "message"), HOSTILE_FILES, ids=[c[0] for c in HOSTILE_FILES])
def test_a_hostile_config_file_is_refused_in_one_line(tmp_path, capsys, name, content, message):
    path = tmp_path / "c.yaml"
    path.write_bytes(content)
    assert message in _fails(["config", "show", str(path)], capsys)


@pytest.mark.parametrize(("override", "message"), HOSTILE_OVERRIDES, ids=[c[0] for c in HOSTILE_OVERRIDES])
def test_a_hostile_override_is_refused_in_one_line(capsys, override, message):
    extra = ["--set", "method.name=fedprox"] if override.startswith("method.params") else []
    assert message in _fails(["config", "show", CONFIG, *extra, "--set", override], capsys)


@pytest.mark.parametrize(("override", "message"), [
    ("method.params.forget_rate=abc", "invalid config at 'method.params.forget_rate': Input should be a valid number, "
     "unable to parse string as a number or 'noise_rate' (got 'abc') (method 'coteaching')"),
    ("method.name=coteachin", "unknown method 'coteachin' at 'method.name' (did you mean 'coteaching'?)"),
])
def test_a_method_param_error_reads_as_the_user_wrote_it(capsys, override, message):
    # Issue 71: pydantic's union tags ('forget_rate.float') are no place a user wrote.
    err = _fails(["config", "show", CONFIG, "--set", "method.name=coteaching", "--set", override], capsys)
    assert message in err and ".float" not in err


def test_a_far_off_key_gets_no_guess(capsys):
    assert "unknown key (check the spelling" in _fails(["config", "show", CONFIG, "--set", "train.zzzzzz=1"], capsys)


def test_a_yaml_timestamp_in_a_string_field_stays_the_string_written():
    from fedcore.config_parse import parse_config_dict

    cfg = parse_config_dict({}, ["tracking.run_name=2024-01-01 10:00:00"])
    assert cfg.tracking.run_name == "2024-01-01 10:00:00"


def test_a_stage_named_with_zero_rounds_stays_valid():
    from fedcore.registries import config_from_dict

    # DivideMix's warmup stage exists only with a budget: naming it with 0 rounds is still meaningful.
    cfg = config_from_dict({"method": {"name": "dividemix"}, "train": {"stage_rounds": {"warmup": 0}}})
    assert cfg.train.stage_rounds == {"warmup": 0}


def test_control_characters_in_an_error_are_escaped(capsys):
    err = _fails(["config", "show", CONFIG, "--set", "data.\x1b[31mbad\u202e=1"], capsys)
    assert "data.\\x1b[31mbad\\u202e" in err and "\x1b" not in err and "\u202e" not in err


@pytest.mark.parametrize(("argv", "expected"), [
    (["--workers", "0"], "error: --workers must be >= 1 (nodes per training stage), got 0"),
    (["--workers", "2", "--resource", "trainjob_prefix=runs/tj"],
     "error: bad task resources: trainjob_prefix must be an s3:// prefix for workers > 1, got 'runs/tj'"),
    (["--gpus", "4", "--set", "train.device=cpu"], "error: --gpus 4 with train.device=cpu: the stage would hold 4 "
     "GPUs and train on none; set train.device=auto or cuda (one rank per GPU), or --gpus 0"),
])
def test_pipeline_resources_a_stage_cannot_use_are_refused(tmp_path, capsys, argv, expected):
    out = tmp_path / "p.yaml"
    assert _fails(["pipeline", "compile", "experiment", CONFIG, "--out", str(out), *argv], capsys) == expected
    assert not out.exists()


def test_a_restricted_setting_without_fold_says_to_fold(tmp_path, capsys):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("methods: [fedavg, fedprox]\nsettings: {noisy: [], clean: [noise.type=none]}\n"
                     "setting_methods: {clean: [fedavg]}\n")
    err = _fails(["pipeline", "run", "sweep", CONFIG, "--local", "--sweep", str(sweep), "--out", str(tmp_path / "o")],
                 capsys)
    assert "--local --fold" in err
    assert not (tmp_path / "o" / "kfp").exists()  # refused at compile time, before any task ran
