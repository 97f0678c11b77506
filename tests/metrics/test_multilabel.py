import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, f1_score, precision_score, recall_score

from fedcore.metrics.multilabel import (
    average_precision,
    corr_distance,
    mean_ap,
    multilabel_eval,
    overall_ap,
    threshold_prf,
    true_correlation,
)

# Fixed arrays: 6 samples, 4 labels; label 3 has no positive; ties in the scores on purpose.
Y = np.array([[1, 0, 1, 0], [0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 1, 0], [1, 0, 0, 0], [0, 1, 1, 0]])
S = np.array([
    [0.9, 0.2, 0.6, 0.7],
    [0.3, 0.8, 0.6, 0.1],
    [0.7, 0.4, 0.2, 0.4],
    [0.3, 0.4, 0.9, 0.2],
    [0.5, 0.1, 0.3, 0.6],
    [0.2, 0.6, 0.6, 0.3],
])


def test_average_precision_by_hand():
    # Ranking 1, 0, 1 (no ties): P@1 = 1 at R = 1/2, P@3 = 2/3 at R = 1 -> (1 + 2/3) / 2.
    assert average_precision(np.array([1, 0, 1]), np.array([0.9, 0.8, 0.1])) == pytest.approx(5 / 6)
    assert np.isnan(average_precision(np.array([0, 0]), np.array([0.1, 0.2])))


@pytest.mark.parametrize("c", [0, 1, 2])
def test_per_label_ap_matches_sklearn_with_ties(c: int):
    assert average_precision(Y[:, c], S[:, c]) == pytest.approx(average_precision_score(Y[:, c], S[:, c]))


def test_map_and_omap_match_sklearn():
    present = Y.sum(axis=0) > 0
    expected = average_precision_score(Y[:, present], S[:, present], average="macro")
    assert mean_ap(Y, S) == pytest.approx(expected)
    assert overall_ap(Y, S) == pytest.approx(average_precision_score(Y, S, average="micro"))


def test_random_arrays_match_sklearn():
    rng = np.random.default_rng(3)
    y = (rng.random((300, 7)) < 0.3).astype(int)
    s = np.round(rng.random((300, 7)), 2)  # rounding creates many ties
    assert mean_ap(y, s) == pytest.approx(average_precision_score(y, s, average="macro"))
    assert overall_ap(y, s) == pytest.approx(average_precision_score(y, s, average="micro"))


def test_threshold_metrics_match_sklearn():
    pred = (S >= 0.5).astype(int)
    m = threshold_prf(Y, pred)
    labels = [0, 1, 2]  # the labels with positives
    cp = precision_score(Y, pred, average="macro", labels=labels, zero_division=0)
    cr = recall_score(Y, pred, average="macro", labels=labels, zero_division=0)
    assert m["CP"] == pytest.approx(cp)
    assert m["CR"] == pytest.approx(cr)
    assert m["CF1"] == pytest.approx(2 * cp * cr / (cp + cr))
    assert m["OP"] == pytest.approx(precision_score(Y, pred, average="micro"))
    assert m["OR"] == pytest.approx(recall_score(Y, pred, average="micro"))
    assert m["OF1"] == pytest.approx(f1_score(Y, pred, average="micro"))


def test_threshold_metrics_by_hand():
    # Label 0: predicted twice, one right; label 1: never predicted; label 2: no positives, one false alarm.
    y = np.array([[1, 1, 0], [0, 1, 0]])
    pred = np.array([[1, 0, 1], [1, 0, 0]])
    m = threshold_prf(y, pred)
    assert m["CP"] == pytest.approx(0.25)  # (1/2 + 0) / 2
    assert m["CR"] == pytest.approx(0.5)  # (1 + 0) / 2
    assert m["OP"] == pytest.approx(1 / 3) and m["OR"] == pytest.approx(1 / 3)


def test_corr_distance_ignores_the_diagonal():
    y = np.array([[1, 1], [0, 0], [1, 0], [0, 1]], dtype=float)  # phi = 0 off the diagonal
    assert corr_distance(y, np.eye(2)) == pytest.approx(0.0)
    assert corr_distance(y, np.array([[1.0, 0.5], [0.5, 1.0]])) == pytest.approx(np.sqrt(0.5))


def test_true_correlation_prefers_the_recorded_one():
    y = np.array([[1, 1], [0, 0], [1, 1], [0, 0]])
    np.testing.assert_allclose(true_correlation({}, y), [[1, 1], [1, 1]])
    np.testing.assert_allclose(true_correlation({"true_corr": [[1, 0.2], [0.2, 1]]}, y), [[1, 0.2], [0.2, 1]])


def test_multilabel_eval_names_and_values():
    logits = torch.logit(torch.tensor(S, dtype=torch.float64).clamp(1e-6, 1 - 1e-6)).float()
    out = multilabel_eval(logits, torch.tensor(Y, dtype=torch.uint8), true_corr=np.eye(4))
    assert set(out) == {f"test/{k}" for k in
                        ("mAP", "OmAP", "CP", "CR", "CF1", "OP", "OR", "OF1", "corr_dist", "corr_dist_hard", "loss")}
    assert out["test/mAP"] == pytest.approx(mean_ap(Y, S), abs=1e-6)
    bce = -np.mean(Y * np.log(S) + (1 - Y) * np.log(1 - S))
    assert out["test/loss"] == pytest.approx(bce, rel=1e-5)
    assert "test/corr_dist" not in multilabel_eval(logits, torch.tensor(Y))


def test_hard_corr_distance_scores_the_predictions_not_the_confidence():
    # Prepare: labels with phi(0, 1) = 1. The soft phi divides by p (1 - p) of the mean score, so
    # it shrinks with confidence: scores 0.4 + 0.2 y give cov 0.26 - 0.25 = 0.01 over 0.25 -> 0.04;
    # scores 0.3 + 0.1 y give (0.125 - 0.1225) / (0.35 * 0.65) = 0.011 and never cross 0.5.
    y = np.array([[1, 1], [1, 1], [0, 0], [0, 0]])
    truth = np.array([[1.0, 1.0], [1.0, 1.0]])
    right_side, never = (torch.logit(torch.tensor(a + b * y, dtype=torch.float64)) for a, b in ((0.4, 0.2), (0.3, 0.1)))
    # Execute
    r, n = (multilabel_eval(x, torch.tensor(y), true_corr=truth) for x in (right_side, never))
    # Assert: soft, both look uncorrelated; thresholded, the first predicts exactly y (distance 0)
    # and the second predicts nothing (phi 0, distance sqrt(2)).
    assert r["test/corr_dist"] == pytest.approx(np.sqrt(2) * 0.96, rel=1e-4)
    assert n["test/corr_dist"] == pytest.approx(np.sqrt(2) * (1 - 0.0025 / 0.2275), rel=1e-4)
    assert r["test/corr_dist_hard"] == pytest.approx(0.0, abs=1e-5)
    assert n["test/corr_dist_hard"] == pytest.approx(np.sqrt(2))
