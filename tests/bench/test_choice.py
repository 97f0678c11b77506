"""The bench's choice rule (fedcore.bench.choice): the method at a setting (default or tuned) with the best
mean on validation, never test; records from before it were chosen among tuned rows (among=OLD_RULE)."""

from __future__ import annotations

import random

import pytest

from fedcore.bench.choice import OLD_RULE, choose


def _row(method, setting, seed, val, test):
    return {"method": method, "setting": setting, "seed": seed, "val_acc_last10": val,
            "acc_last10": test, "acc_best": test + 0.01, "acc_at_val_best": test - 0.01}


ROWS = [
    _row("fedavg", "tuned", 0, 0.60, 0.90), _row("fedavg", "tuned", 1, 0.70, 0.92),   # mean val 0.65
    _row("fedsir", "tuned", 0, 0.80, 0.50), _row("fedsir", "tuned", 1, 0.60, 0.40),   # mean val 0.70
    _row("fedprox", "tuned", 0, 0.64, 0.99), _row("fedprox", "tuned", 1, 0.64, 0.99),  # mean val 0.64
    # FedProx's default validates best of all: its tune made it worse on the reporting seeds.
    _row("fedprox", "default", 0, 0.99, 0.99), _row("fedprox", "default", 1, 0.99, 0.99),
]


def test_the_choice_is_a_method_at_a_setting_default_and_tuned_alike():
    got = choose(ROWS, [0, 1])
    assert (got["choice"], got["choice_setting"]) == ("fedprox", "default")
    # The runner-up is the best other method: FedProx's own tuned setting is not a rival to it.
    assert (got["runner_up"], got["runner_up_setting"], got["among"]) == ("fedsir", "tuned", ["default", "tuned"])
    assert got["margin"] == pytest.approx(0.29)
    assert got["means"] == pytest.approx({"fedprox (default)": 0.99, "fedsir (tuned)": 0.70,
                                          "fedavg (tuned)": 0.65, "fedprox (tuned)": 0.64})
    assert list(got["means"])[0] == "fedprox (default)" and got["left_out"] == []


def test_the_old_rule_of_the_records_reads_tuned_rows_only():
    got = choose(ROWS, [0, 1], among=OLD_RULE)
    assert (got["choice"], got["choice_setting"], got["runner_up"]) == ("fedsir", "tuned", "fedavg")
    assert got["margin"] == pytest.approx(0.05)
    assert list(got["means"]) == ["fedsir (tuned)", "fedavg (tuned)", "fedprox (tuned)"]


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


def test_a_setting_without_a_score_on_every_reporting_seed_is_left_out():
    rows = [*ROWS, _row("dividemix", "tuned", 0, 0.995, 0.5),  # seed 1 missing
            {**_row("fedgr", "default", 0, 0.0, 0.0), "val_acc_last10": None}, _row("fedgr", "default", 1, 0.999, 0.9),
            _row("fedgr", "tuned", 0, 0.1, 0.1), _row("fedgr", "tuned", 1, 0.1, 0.1)]
    got = choose(rows, [0, 1])
    assert (got["choice"], got["choice_setting"]) == ("fedprox", "default")
    assert got["left_out"] == ["dividemix (tuned)", "fedgr (default)"] and "fedgr (tuned)" in got["means"]
    # Scores on a seed outside the reporting seeds (the tuning seed) do not count either.
    assert choose([*ROWS, _row("fedavg", "tuned", 100, 1.0, 1.0)], [0, 1])["choice"] == "fedprox"


def test_ties_go_to_the_first_name_then_its_default_and_one_method_has_no_runner_up():
    tie = [_row("b", "tuned", 0, 0.5, 0.1), _row("a", "tuned", 0, 0.5, 0.9)]
    assert (choose(tie, [0])["choice"], choose(tie, [0])["margin"]) == ("a", 0.0)
    # A tune that kept its default reruns it: equal means, and the default names that setting.
    kept = [_row("a", "tuned", 0, 0.5, 0.1), _row("a", "default", 0, 0.5, 0.1)]
    assert (choose(kept, [0])["choice"], choose(kept, [0])["choice_setting"]) == ("a", "default")
    alone = choose([_row("a", "tuned", 0, 0.5, 0.1), _row("a", "default", 0, 0.4, 0.1)], [0])
    assert (alone["choice"], alone["runner_up"], alone["margin"]) == ("a", None, None)
    assert choose([], [0])["choice"] is None and choose([], [0])["choice_setting"] is None


def test_the_choice_line_is_in_percent_and_warns_when_one_seed_cannot_judge_the_margin():
    """Issue 71.4: it read 'val acc last-10 0.3067 ... by 0.0200', in fractions beside tables in %,
    and said nothing of a margin taken on one seed."""
    from fedcore.bench.choice import choice_line

    one = {**choose(ROWS, [0]), "rows": ROWS, "metric": "acc"}
    assert choice_line("q", one) == (
        "q: fedprox at its default setting (val acc last-10 99.0%), runner-up fedsir (tuned) by 19.0 points "
        "on one reporting seed, which cannot tell that margin from seed-to-seed spread (give the grid more seeds)")
    two = {**choose(ROWS, [0, 1]), "rows": ROWS, "metric": "acc"}
    assert choice_line("q", two) == (
        "q: fedprox at its default setting (val acc last-10 99.0%), runner-up fedsir (tuned) by 29.0 points")
    assert choice_line("q", {**two, "still_to_run": {"runs": 1}}).startswith("q (so far): fedprox")
    close = {**two, "margin": 0.0004}  # a lead under a tenth of a point keeps its digits
    assert "by 0.04 points" in choice_line("q", close)


def test_the_choice_line_of_an_old_record_says_it_read_tuned_rows_only():
    from fedcore.bench.choice import choice_line

    old = {k: v for k, v in choose(ROWS, [0, 1], among=OLD_RULE).items() if k != "among"}
    # FedSIR leads FedAvg on the mean (0.70 against 0.65) but not on seed 1 (0.60 against 0.70): the line says so.
    assert choice_line("q", {**old, "rows": ROWS}).endswith(
        "runner-up fedavg (tuned) by 5.0 points, which is ahead on seed 1; chosen among tuned settings only "
        "(the rule of this record's time)")
    assert choice_line("q", {**old, "choice": None}) == (
        "q: no method has a validation score on every reporting seed at either setting")
