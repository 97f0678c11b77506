"""final/acc_at_val_best: the test score at the round validation picks (never the test-best one)."""

import math

import pytest

from fedcore.errors import ConfigError
from fedcore.metrics.classification import at_val_best
from fedcore.registries import load_config
from fedcore.run import summarize


def test_the_round_validation_picks_not_the_test_best_one():
    history = [
        {"round": 1.0, "test/acc": 0.50, "val/acc": 0.40},
        {"round": 2.0, "test/acc": 0.90, "val/acc": 0.45},  # test-best round
        {"round": 3.0, "test/acc": 0.70, "val/acc": 0.60},  # val-best round
        {"round": 4.0, "train/loss": 1.0},  # not evaluated
        {"round": 5.0, "test/acc": 0.65, "val/acc": 0.60},  # a tie goes to the earlier round
    ]
    out = at_val_best(history)
    assert out == {"final/acc_at_val_best": 0.70, "final/val_acc_best": 0.60, "final/val_best_round": 3.0,
                   "final/val_acc_last10": pytest.approx((0.40 + 0.45 + 0.60 + 0.60) / 4)}
    summary = summarize(history, "single")
    assert summary["final/acc_best"] == 0.90 and summary["final/acc_at_val_best"] == 0.70


def test_server_set_and_multilabel_names_and_nan_rounds():
    history = [{"round": 1.0, "test/mAP": 0.3, "val_server/mAP": math.nan},
               {"round": 2.0, "test/mAP": 0.2, "val_server/mAP": 0.5}]
    assert at_val_best(history, "test/mAP", "val_server/mAP") == {
        "final/mAP_at_val_server_best": 0.2, "final/val_server_mAP_best": 0.5, "final/val_server_best_round": 2.0,
        "final/val_server_mAP_last10": 0.5}
    assert at_val_best([{"round": 1.0, "test/acc": 0.5}]) == {}  # no validation: no key at all


def test_early_stopping_without_validation_is_refused():
    with pytest.raises(ConfigError, match="never on the test split"):
        load_config("configs/quickstart.yaml", ["train.early_stop_patience=3"])
    assert load_config("configs/quickstart.yaml", ["train.early_stop_patience=3",
                                                   "data.validation.server_clean=20"]).train.early_stop_patience == 3
