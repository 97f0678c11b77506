"""Transition-matrix estimate from predictions (FedRG's t_init=estimate)."""

import numpy as np
import pytest

from fedcore.stats.transition import estimate_transition


def onehot(classes, c=3):
    return np.eye(c)[np.asarray(classes)]


def test_one_hot_true_class_predictions_recover_the_known_confusion():
    # True class 0: six given label 1, four label 2; true class 1: five given label 0; class 2: none.
    true = np.repeat([0, 0, 1], [6, 4, 5])
    given = np.repeat([1, 2, 0], [6, 4, 5])
    t = estimate_transition(onehot(true), given, 3, prior=1.0)
    np.testing.assert_allclose(t, [[1 / 11, 6 / 11, 4 / 11], [5 / 6, 1 / 6, 0.0], [0.0, 0.0, 1.0]])
    # Without the prior it is the confusion itself; a class nobody is predicted as keeps its label.
    t0 = estimate_transition(onehot(true), given, 3, prior=0.0)
    np.testing.assert_allclose(t0, [[0.0, 0.6, 0.4], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])


def test_soft_predictions_spread_their_mass_over_rows():
    probs = np.array([[0.5, 0.5, 0.0], [0.0, 0.25, 0.75]])
    t = estimate_transition(probs, np.array([2, 0]), 3, prior=1.0)
    # counts: row 0 gets 0.5 at label 2; row 1 0.5 at label 2 and 0.25 at label 0; row 2 0.75 at label 0
    np.testing.assert_allclose(t, [[1 / 1.5, 0.0, 0.5 / 1.5], [0.25 / 1.75, 1 / 1.75, 0.5 / 1.75],
                                   [0.75 / 1.75, 0.0, 1 / 1.75]])
    np.testing.assert_allclose(t.sum(1), 1.0)


def test_empty_input_is_the_identity_and_bad_shapes_raise():
    np.testing.assert_allclose(estimate_transition(np.zeros((0, 3)), np.zeros(0, int), 3), np.eye(3))
    with pytest.raises(ValueError):
        estimate_transition(np.ones((2, 4)) / 4, np.array([0, 1]), 3)
