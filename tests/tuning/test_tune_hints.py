"""What `fedcore tune` tells a user (issue 53): the closing hint runs best.yaml on a reporting seed,
not the tuning seed (defect 9), and a tune dir of another tune names the keys that differ rather
than two config hashes (defect 6)."""

from __future__ import annotations

import json
import re

import pytest

from fedcore import cli
from fedcore.registries import load_config

CONFIG = "configs/quickstart.yaml"
FAST = ["method.name=fedavg", "train.rounds=3", "train.device=cpu", "train.threads=1", "tracking.backend=none",
        "train.memorization=false", "seed=100", "data.validation.fraction=0.1"]


def _sets(extra=()):
    return [a for s in [*FAST, *extra] for a in ("--set", s)]


def test_the_hint_runs_best_yaml_on_a_reporting_seed_and_a_mismatch_names_keys(tmp_path, capsys):
    out = tmp_path / "tune"
    cli.main(["tune", CONFIG, *_sets(), "--trials", "1", "--out", str(out), "--no-progress"])
    best, hint = capsys.readouterr().out.strip().splitlines()[-2:]
    assert load_config(out / "best.yaml").seed == 100  # best.yaml keeps the seed it was tuned on
    tune = json.loads((out / "tune.json").read_text())  # the file keeps the fraction; the line says %
    assert best.startswith(f"best {tune['objective']} = {100 * tune['best_value']:.2f}% (trial 0"), best
    assert hint.startswith(f"run it: fedcore run {out / 'best.yaml'} --set seed=0 "), hint
    assert "tuning seed 100" in hint


def test_a_tune_dir_of_another_tune_names_the_keys_that_differ(tmp_path, capsys):
    out = tmp_path / "tune"
    cli.main(["tune", CONFIG, *_sets(), "--trials", "1", "--out", str(out), "--no-progress"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        cli.main(["tune", CONFIG, *_sets(["train.rounds=4"]), "--trials", "1", "--out", str(out),
                  "--param", "train.lr", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1, err
    assert "train.rounds: 3 (tune) vs 4" in err and "--param: " in err, err
    assert not re.search(r"\b[0-9a-f]{16}\b", err), err  # no config hashes


def test_the_hint_avoids_seed_0_when_the_tune_used_it(tmp_path, capsys):
    from fedcore.cli.tune import reporting_seed

    assert reporting_seed(100) == 0 and reporting_seed(0) == 1
