"""Metrics against scikit-learn and hand-computed values on fixed arrays."""

import numpy as np
import pytest
from sklearn.metrics import confusion_matrix, f1_score, precision_recall_fscore_support

from fedcore.engine.types import Estimates
from fedcore.metrics import (
    accuracy,
    binary_prf,
    confusion,
    flag_dependence,
    last_k_mean,
    macro_prf,
    memorization_rate,
    rate_pearson_mae,
    relabel_metrics,
    summarize_history,
)
from fedcore.metrics.scoring import Scorer
from tests.engine.helpers import tiny_fed

Y = np.array([0, 1, 2, 2, 1, 0, 3, 3, 1, 2])
P = np.array([0, 2, 2, 2, 1, 1, 3, 0, 1, 0])


def test_accuracy_and_confusion_match_sklearn():
    assert accuracy(Y, P) == pytest.approx(0.6)
    assert np.array_equal(confusion(Y, P, 4), confusion_matrix(Y, P, labels=range(4)))


def test_macro_prf_matches_sklearn():
    ours = macro_prf(Y, P, 4)
    p, r, f, _ = precision_recall_fscore_support(Y, P, average="macro", zero_division=0)
    assert ours["precision"] == pytest.approx(p) and ours["recall"] == pytest.approx(r)
    # sklearn's macro F1 averages per-class F1 (not the F1 of the averages); so do we.
    assert ours["f1"] == pytest.approx(f1_score(Y, P, average="macro", zero_division=0))


def test_binary_prf_matches_sklearn_and_handles_empty():
    pred = np.array([1, 1, 0, 0, 1, 0], bool)
    true = np.array([1, 0, 0, 1, 1, 0], bool)
    ours = binary_prf(pred, true)
    p, r, f, _ = precision_recall_fscore_support(true, pred, average="binary")
    assert (ours["precision"], ours["recall"], ours["f1"]) == pytest.approx((p, r, f))
    assert ours["acc"] == pytest.approx(4 / 6)
    assert binary_prf(np.zeros(3, bool), np.zeros(3, bool))["f1"] == 0.0


def test_rate_pearson_mae_by_hand():
    est, true = np.array([0.1, 0.5, 0.9]), np.array([0.0, 0.5, 1.0])
    out = rate_pearson_mae(est, true)
    assert out["pearson"] == pytest.approx(1.0) and out["mae"] == pytest.approx(0.2 / 3)
    assert np.isnan(rate_pearson_mae(np.array([0.2, 0.2]), np.array([0.1, 0.5]))["pearson"])


def test_relabel_metrics_by_hand():
    true = np.array([0, 1, 2, 3, 4, 5])
    before = np.array([0, 1, 9, 9, 4, 5])   # samples 2, 3 noisy
    after = np.array([0, 7, 2, 8, 4, 5])    # fixed 2, changed 3 wrongly, damaged 1
    out = relabel_metrics(before, after, true)
    assert out["precision"] == pytest.approx(1 / 3)
    assert out["recall"] == pytest.approx(1 / 2)
    assert out["damage"] == pytest.approx(1 / 4)
    assert out["label_acc"] == pytest.approx(4 / 6)
    assert out["changed"] == pytest.approx(3 / 6)


def test_memorization_and_history_summary():
    assert memorization_rate(np.array([1, 2, 3, 4]), np.array([1, 0, 3, 0]), np.array([1, 1, 1, 0], bool)) == \
        pytest.approx(2 / 3)
    hist = [{"test/acc": v} for v in np.arange(1, 13) / 20] + [{"train/loss": 1.0}]
    out = summarize_history(hist)
    assert out["final/acc"] == 0.6 and out["final/acc_best"] == 0.6
    assert out["final/acc_last10"] == pytest.approx(np.mean(np.arange(3, 13) / 20))
    assert last_k_mean([float("nan"), 1.0, 3.0], 10) == 2.0


def test_flag_dependence_by_hand():
    labels = np.array([0, 0, 1, 1, 2, 2])
    # flags a function of the label: NMI = I / mean(H(y), H(f)) with I = H(f)
    flags = labels == 0
    h_f = -(1 / 3 * np.log(1 / 3) + 2 / 3 * np.log(2 / 3))
    assert flag_dependence(flags, labels) == pytest.approx(2 * h_f / (np.log(3) + h_f))
    assert flag_dependence(labels == 0, labels == 0) == pytest.approx(1.0)
    # flags independent of a binary label (every cell of the 2x2 table equal): 0
    assert flag_dependence(np.array([0, 1, 0, 1], bool), np.array([0, 0, 1, 1])) == pytest.approx(0.0, abs=1e-12)
    assert np.isnan(flag_dependence(np.zeros(0, bool), np.zeros(0)))


def test_scorer_maps_estimates_to_named_metrics():
    fed = tiny_fed()  # truth: noisy samples at positions 1 and 4; realized rate 1/3 on both clients
    scorer = Scorer(fed)
    est = Estimates(
        client_rate={0: 0.3, 1: 0.5},
        client_noisy={0: True, 1: False},
        sample_noisy={"main": {0: np.array([0, 1, 0], bool), 1: np.array([1, 1, 0], bool)}},
        labels={0: np.array([0, 0, 0])},
    )
    out = scorer(est, 1)
    assert out["noise/rate_est/client_00"] == 0.3
    assert out["noise/rate_mae"] == pytest.approx((abs(0.3 - 1 / 3) + abs(0.5 - 1 / 3)) / 2)
    assert out["detect/client_precision"] == 1.0 and out["detect/client_recall"] == 0.5
    assert out["detect/sample_recall"] == 1.0 and out["detect/sample_precision"] == pytest.approx(0.75)
    # pooled flags [0,1,0 | 1,1,0] against the given labels [0,1,0,1,0,1] and the truth [0,1,0,0,1,0]
    flags = np.array([0, 1, 0, 1, 1, 0], bool)
    assert out["detect/sample_label_nmi"] == pytest.approx(flag_dependence(flags, [0, 1, 0, 1, 0, 1]))
    assert out["detect/sample_noise_nmi"] == pytest.approx(flag_dependence(flags, [0, 1, 0, 0, 1, 0]))
    assert out["detect/sample_noise_nmi"] > out["detect/sample_label_nmi"]
    # client 0 before [0, 1, 0], truth [0, 0, 0], after [0, 0, 0]: the one change fixes the one noisy label
    assert out["relabel/precision"] == 1.0 and out["relabel/recall"] == 1.0 and out["relabel/damage"] == 0.0


def test_best_round_on_a_constructed_history():
    # Evaluations every other round (round 1 has none); 0.7 is reached at rounds 4 and 8: the earliest wins.
    hist = [{"round": 1.0, "train/loss": 2.0}] + [
        {"round": float(r), "test/acc": a} for r, a in ((2, 0.5), (4, 0.7), (6, 0.6), (8, 0.7), (10, 0.4))]
    out = summarize_history(hist)
    assert out["final/acc_best"] == 0.7 and out["final/acc_best_round"] == 4.0
    assert out["final/acc"] == 0.4 and out["final/acc_last10"] == pytest.approx(2.9 / 5)
    # A NaN evaluation (a diverged round) is never the best; without `round`, positions count from 1.
    out = summarize_history([{"test/acc": 0.2}, {"test/acc": float("nan")}, {"test/acc": 0.3}])
    assert out["final/acc_best"] == 0.3 and out["final/acc_best_round"] == 3.0
    out = summarize_history([{"round": 3.0, "test/mAP": 0.9}, {"round": 5.0, "test/mAP": 0.8}], "test/mAP")
    assert out["final/mAP_best"] == 0.9 and out["final/mAP_best_round"] == 3.0
