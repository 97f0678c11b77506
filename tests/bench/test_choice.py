"""The bench's choice rule (fedcore.bench.choice): the best tuned mean on validation, never test."""

from __future__ import annotations

import random

import pytest

from fedcore.bench.choice import choose


def _row(method, setting, seed, val, test):
    return {"method": method, "setting": setting, "seed": seed, "val_acc_last10": val,
            "acc_last10": test, "acc_best": test + 0.01, "acc_at_val_best": test - 0.01}


ROWS = [
    _row("fedavg", "tuned", 0, 0.60, 0.90), _row("fedavg", "tuned", 1, 0.70, 0.92),   # mean val 0.65
    _row("fedsir", "tuned", 0, 0.80, 0.50), _row("fedsir", "tuned", 1, 0.60, 0.40),   # mean val 0.70
    _row("fedprox", "tuned", 0, 0.64, 0.99), _row("fedprox", "tuned", 1, 0.64, 0.99),  # mean val 0.64
    # A default setting never counts, however well it validates.
    _row("fedprox", "default", 0, 0.99, 0.99), _row("fedprox", "default", 1, 0.99, 0.99),
]


def test_the_choice_is_the_best_tuned_mean_validation_score():
    got = choose(ROWS, [0, 1])
    assert (got["choice"], got["runner_up"]) == ("fedsir", "fedavg")
    assert got["margin"] == pytest.approx(0.05)
    assert got["means"] == pytest.approx({"fedsir": 0.70, "fedavg": 0.65, "fedprox": 0.64})
    assert list(got["means"]) == ["fedsir", "fedavg", "fedprox"] and got["left_out"] == []


def test_permuting_the_test_accuracies_leaves_the_choice_unchanged():
    # FedSIR has the worst test numbers and FedProx the best: a rule that read them would move.
    before = choose(ROWS, [0, 1])
    rng = random.Random(0)
    for _ in range(20):
        tests = [(r["acc_last10"], r["acc_best"], r["acc_at_val_best"]) for r in ROWS]
        rng.shuffle(tests)
        shuffled = [{**r, "acc_last10": a, "acc_best": b, "acc_at_val_best": c}
                    for r, (a, b, c) in zip(ROWS, tests, strict=True)]
        assert choose(shuffled, [0, 1]) == before
    # The validation scores do decide: swapping FedSIR's and FedProx's changes it.
    swapped = [{**r, "method": {"fedsir": "fedprox", "fedprox": "fedsir"}.get(r["method"], r["method"])}
               for r in ROWS if r["setting"] == "tuned"]
    assert choose(swapped, [0, 1])["choice"] == "fedprox"


def test_a_method_without_a_score_on_every_reporting_seed_is_left_out():
    rows = [*ROWS, _row("dividemix", "tuned", 0, 0.95, 0.5),  # seed 1 missing
            {**_row("fedgr", "tuned", 0, 0.0, 0.0), "val_acc_last10": None}, _row("fedgr", "tuned", 1, 0.99, 0.9)]
    got = choose(rows, [0, 1])
    assert got["choice"] == "fedsir" and got["left_out"] == ["dividemix", "fedgr"]
    # Scores on a seed outside the reporting seeds (the tuning seed) do not count either.
    assert choose([*ROWS, _row("fedavg", "tuned", 100, 1.0, 1.0)], [0, 1])["choice"] == "fedsir"


def test_ties_go_to_the_first_name_and_one_method_has_no_runner_up():
    tie = [_row("b", "tuned", 0, 0.5, 0.1), _row("a", "tuned", 0, 0.5, 0.9)]
    assert (choose(tie, [0])["choice"], choose(tie, [0])["margin"]) == ("a", 0.0)
    alone = choose([_row("a", "tuned", 0, 0.5, 0.1)], [0])
    assert (alone["choice"], alone["runner_up"], alone["margin"]) == ("a", None, None)
    assert choose([], [0])["choice"] is None
