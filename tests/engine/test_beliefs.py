"""BeliefLog: the latest beliefs per client, passed through to the scorer, written as a stage's outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedcore.engine.beliefs import BELIEFS_FILE, LABELS_FILE, BeliefLog
from fedcore.engine.types import Estimates, Stage


def test_later_rounds_win_client_by_client_and_the_scorer_still_scores():
    scored = []
    log = BeliefLog(lambda est, rnd: scored.append(rnd) or {"detect/client_f1": 1.0})

    assert log(Estimates(client_noisy={0: True, 1: False}, client_rate={0: 0.4}), 1) == {"detect/client_f1": 1.0}
    log(Estimates(client_noisy={1: True}), 3)

    assert scored == [1, 3]
    assert log.client_noisy == {0: True, 1: True} and log.client_rate == {0: 0.4}
    assert log.rounds == {"verdicts": 3, "rates": 1}


def test_summary_counts_relabeled_samples_against_the_given_labels(tmp_path):
    log = BeliefLog()
    log(Estimates(labels={1: np.array([0, 2, 2, 1])}), 2)
    given = [np.array([0, 0]), np.array([0, 1, 2, 3])]

    summary = log.summary(given)
    assert summary["relabeled"] == {"1": 2} and summary["noisy_clients"] == []
    log.write(tmp_path, given)
    assert json.loads((tmp_path / BELIEFS_FILE).read_text())["rounds"] == {"labels": 2}
    np.testing.assert_array_equal(np.load(tmp_path / LABELS_FILE)["client_01"], [0, 2, 2, 1])


def test_a_run_without_labels_removes_an_earlier_labels_file(tmp_path):
    (tmp_path / LABELS_FILE).write_bytes(b"stale")
    BeliefLog().write(tmp_path)
    assert not (tmp_path / LABELS_FILE).exists()
    assert json.loads((tmp_path / BELIEFS_FILE).read_text())["client_noisy"] == {}


def test_a_stage_yields_only_known_outputs():
    assert Stage("identify", 1, yields=("verdicts",)).yields == ("verdicts",)
    with pytest.raises(ValueError, match="weights"):
        Stage("x", 1, yields=("weights",))
