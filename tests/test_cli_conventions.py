"""The conventions of docs/usage.md ("Conventions"), checked on every command by walking the typer
app: -h and --version, help within 80 columns, one list style, the same tracking options wherever
MLflow is read or written, --set wherever a config is read, and outputs under runs/ by default.

A new command is walked too: it passes only if it follows them (or is named below, with why not).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main

from fedcore import __version__
from fedcore.cli import app, main
from fedcore.cli.console import LIST_HELP, split_list


def _walk(cmd, path: tuple[str, ...] = ()):
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _walk(sub, (*path, name))


ROOT = typer.main.get_command(app)
COMMANDS = {" ".join(path): cmd for path, cmd in _walk(ROOT)}
LEAVES = {name: cmd for name, cmd in COMMANDS.items() if not hasattr(cmd, "commands")}

# Options that take key=value pairs are repeated, never comma-split: a value may hold commas.
KEY_VALUE = {"--set", "--resource", "--node-selector"}
# Commands that write to MLflow (a run's tracking), and those that read an experiment from it.
WRITERS = {"run", "resume", "tune", "bench", "quickstart", "pipeline compile", "pipeline run", "pipeline submit",
           "pipeline schedule", "deploy katib"}
READERS = {"compare", "report"}
# MLflow without the tracking options, and why: sync replays into the store and run the run
# recorded; smoke and mlflow-auth act on the pod's own environment (MLFLOW_TRACKING_URI).
NOT_TRACKING = {"tracking sync", "deploy smoke", "deploy mlflow-auth"}
# Commands that read a config without a CONFIG argument.
READS_A_CONFIG = {"quickstart", "resume", "bench"}


def _options(cmd) -> dict[str, object]:
    return {opt: p for p in cmd.params for opt in [*p.opts, *p.secondary_opts] if opt.startswith("--")}


def _help(name: str, capsys) -> str:
    argv = [*name.split(), "-h"] if name else ["-h"]
    try:
        main(argv)
    except SystemExit as err:
        assert err.code in (0, None), f"`fedcore {' '.join(argv)}` exited {err.code}"
    return capsys.readouterr().out


@pytest.mark.parametrize("name", list(COMMANDS), ids=lambda n: n or "fedcore")
def test_dash_h_prints_help_that_fits_80_columns_uncut(name, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    text = _help(name, capsys)
    assert text.startswith("Usage: ")
    too_wide = [line for line in text.splitlines() if len(line) > 80]
    assert not too_wide, too_wide
    # '…' is rich cutting a word; '...' ending a command's row is click cutting its short help.
    cut = [line for line in text.splitlines() if "…" in line or re.match(r"  \S+ {2,}.*\.\.\.$", line)]
    assert not cut, cut


def test_version_prints_the_package_version(capsys):
    try:
        main(["--version"])
    except SystemExit as err:
        assert err.code in (0, None)
    assert capsys.readouterr().out.strip() == f"fedcore {__version__}"


@pytest.mark.parametrize("name", list(LEAVES))
def test_a_list_option_is_singular_and_takes_repeats_or_commas(name):
    for opt, param in _options(LEAVES[name]).items():
        if not getattr(param, "multiple", False) or opt in KEY_VALUE or opt in param.secondary_opts:
            continue
        primary = next(o for o in param.opts if o.startswith("--"))
        if opt != primary and opt == primary + "s":
            continue  # the plural spelling kept for scripts written before one list style
        assert param.help.endswith(LIST_HELP), f"{name} {opt}: use console.list_option"
        assert not primary.endswith("s"), f"{name} {opt}: name a list option in the singular"


def test_the_list_parser_flattens_repeats_and_commas():
    assert split_list(["fedavg,fedsir", " fedprox ", ","]) == ["fedavg", "fedsir", "fedprox"]
    assert split_list(None) is None


@pytest.mark.parametrize("name, argv, key, expected", [
    ("pipeline run", ["sweep", "--method", "fedavg,fedsir", "--method", "fedprox"], "method",
     ["fedavg", "fedsir", "fedprox"]),
    ("pipeline run", ["sweep", "--seed", "0,1", "--seed", "2"], "seed", [0, 1, 2]),
    ("bench", ["grid.yaml", "--method", "fedavg", "--method", "fedsir"], "methods", ["fedavg", "fedsir"]),
    ("bench", ["grid.yaml", "--methods", "fedavg,fedsir"], "methods", ["fedavg", "fedsir"]),
    ("bench", ["grid.yaml", "--seed", "0", "--seeds", "1,2"], "seeds", [0, 1, 2]),
    ("deploy check", ["--overlay", "local,gpu"], "overlay", ["local", "gpu"]),
])
def test_a_list_parses_the_same_repeated_or_comma_separated(name, argv, key, expected):
    ctx = LEAVES[name].make_context(name, list(argv))
    assert ctx.params[key] == expected


def test_a_seed_that_is_not_an_integer_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["pipeline", "run", "sweep", "--seed", "0,x"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --seed '0,x': give integers, e.g. --seed 0 --seed 1 or --seed 0,1"


def test_every_command_that_touches_mlflow_is_classified():
    for name, cmd in LEAVES.items():
        text = " ".join([cmd.help or "", *(getattr(p, "help", "") or "" for p in cmd.params)])
        if "MLflow" in text or {"--tracking", "--tracking-uri", "--experiment"} & set(_options(cmd)):
            assert name in WRITERS | READERS | NOT_TRACKING, f"{name} reads or writes MLflow: classify it here"


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_command_writing_to_mlflow_takes_the_tracking_options(name):
    opts = _options(LEAVES[name])
    assert {"--tracking", "--no-tracking", "--tracking-uri"} <= set(opts), name


@pytest.mark.parametrize("name", sorted(READERS))
def test_a_command_reading_mlflow_takes_the_experiment_and_the_uri(name):
    assert {"--experiment", "--tracking-uri"} <= set(_options(LEAVES[name])), name


@pytest.mark.parametrize("name", list(LEAVES))
def test_a_command_that_reads_a_config_takes_set(name):
    cmd = LEAVES[name]
    if name in READS_A_CONFIG or any(p.name == "config" for p in cmd.params):
        assert "--set" in _options(cmd), f"{name} reads a config: give it --set (console.set_option)"


@pytest.mark.parametrize("name", list(LEAVES))
def test_outputs_go_under_runs_unless_out_is_given(name):
    out = _options(LEAVES[name]).get("--out")
    if out is None or out.required:
        return
    if out.default is not None:
        assert Path(out.default).parts[0] == "runs", f"{name} --out defaults to {out.default}"
    else:  # computed in the command: its help says where
        # A read-only command writes nothing unless --out is given (issue 71): its help says so.
        assert re.search(r"\bruns/|stdout|default: none", out.help), f"{name} --out: say the default (under runs/)"


def test_the_tracking_options_become_overrides():
    from fedcore.cli.console import tracking_sets

    assert tracking_sets(None, None) == []
    assert tracking_sets(False, None) == ["tracking.backend=none"]
    assert tracking_sets(None, "http://mlflow:5000") == ["tracking.backend=mlflow", "tracking.uri=http://mlflow:5000"]


def test_a_pipelines_tracking_uri_replaces_the_local_store(tmp_path, monkeypatch):
    from fedcore.cli.pipeline import load_pipeline_config

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    local = load_pipeline_config(None, None, True, tmp_path)
    assert local.tracking.uri.startswith("sqlite:///") and str(tmp_path) in local.tracking.uri
    given = load_pipeline_config(None, None, True, tmp_path, uri="http://mlflow.example:5000")
    assert (given.tracking.backend, given.tracking.uri) == ("mlflow", "http://mlflow.example:5000")


def test_quickstart_applies_set_after_its_own_settings(tmp_path):
    from fedcore.cli.quickstart import quickstart_pipeline

    cfg, _ = quickstart_pipeline(tmp_path, 2, ("fedavg",), True, ["train.lr=0.0123", "train.rounds=3"])
    assert cfg.train.lr == 0.0123 and cfg.train.rounds == 3  # --set wins over --rounds' train.rounds=2


def test_compare_refuses_a_tracking_uri_without_an_experiment(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", str(tmp_path), "--tracking-uri", "http://mlflow.example:5000"])
    assert exit_info.value.code == 2
    assert "--tracking-uri is where --experiment is read from" in capsys.readouterr().err


def test_the_bench_choice_line_reads_in_percent_and_points():
    from fedcore.bench.choice import choice_line

    mean, margin = 0.36412, 0.00223
    scene = {"choice": "fedsir", "choice_setting": "tuned", "means": {"fedsir (tuned)": mean}, "metric": "acc",
             "runner_up": "fednoro", "runner_up_setting": "tuned", "margin": margin, "left_out": []}
    assert choice_line("quickstart", scene).startswith(
        f"quickstart: fedsir at its tuned setting (val acc last-10 {100 * mean:.1f}%), runner-up fednoro (tuned) "
        f"by {100 * margin:.1f} points")
