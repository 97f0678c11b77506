"""FedGR's pure pieces, checked by hand: loss windows, sieving, refining tiers, EMA revision."""

import numpy as np
import pytest
import torch
from torch import nn

from fedcore.stats.sieving import local_sieve, pooled_sieve, push_window, window_mean
from fedcore.train.ema import ema_step_, ema_update_, revise
from fedcore.train.refine import masked_soft_ce, pseudo_labels, refine_targets, select_targets


def test_window_keeps_the_newest_t_obs_losses():
    w = push_window(None, np.array([1.0, 2.0]), t_obs=2)
    w = push_window(w, np.array([3.0, 4.0]), t_obs=2)
    assert w.tolist() == [[1.0, 3.0], [2.0, 4.0]]
    w = push_window(w, np.array([5.0, 6.0]), t_obs=2)
    assert w.tolist() == [[3.0, 5.0], [4.0, 6.0]]
    assert window_mean(w).tolist() == [4.0, 5.0]
    with pytest.raises(ValueError):
        push_window(w, np.array([1.0, 2.0, 3.0]), t_obs=2)


def _two_clients():
    # Client 0: ten small losses (clean). Client 1: five small, then five large (noisy).
    rng = np.random.default_rng(0)
    low = lambda n: rng.normal(0.2, 0.05, n)  # noqa: E731
    return {0: low(10), 1: np.concatenate([low(5), rng.normal(3.0, 0.05, 5)])}


def test_pooled_sieve_clean_is_the_lower_mean_and_rates_by_hand():
    res = pooled_sieve(_two_clients(), seed=0, estimator="threshold")
    assert (res.q[0] > 0.99).all()
    assert (res.q[1][:5] > 0.99).all() and (res.q[1][5:] < 0.01).all()
    assert res.rate == {0: 0.0, 1: 0.5}
    mean = pooled_sieve(_two_clients(), seed=0, estimator="mean")
    assert mean.rate[0] == pytest.approx(0.0, abs=0.01) and mean.rate[1] == pytest.approx(0.5, abs=0.01)


def test_local_sieve_cannot_see_a_client_that_is_all_noisy():
    # Client 1 holds only large losses. Pooled with the clean client 0 it is all noisy;
    # on its own the GMM splits its own losses in two, so about half look clean.
    rng = np.random.default_rng(1)
    lbar = {0: rng.normal(0.2, 0.05, 20), 1: rng.normal(3.0, 0.3, 20)}
    assert pooled_sieve(lbar, seed=0, estimator="threshold").rate == {0: 0.0, 1: 1.0}
    local = local_sieve(lbar, seed=0, estimator="threshold").rate
    assert 0.0 < local[0] < 1.0 and 0.0 < local[1] < 1.0


def test_pseudo_labels_confidence_threshold():
    logits = torch.log(torch.tensor([[0.96, 0.02, 0.02], [0.5, 0.3, 0.2], [0.01, 0.01, 0.98]]))
    y, confident = pseudo_labels(logits, tau_conf=0.95)
    assert y.tolist() == [0, 0, 2] and confident.tolist() == [True, False, True]


Y_HAT = torch.tensor([0, 1, 2, 0])
Q = torch.tensor([0.9, 0.2, 0.3, 0.6])
Y_PSE = torch.tensor([1, 0, 0, 2])
CONF = torch.tensor([True, True, False, False])


def test_low_rate_tiers_keep_or_soften():
    targets, keep = refine_targets(Y_HAT, Q, 0.2, Y_PSE, CONF, beta=0.4, num_classes=3)
    expected = [[1, 0, 0],  # q >= .5: given label 0
                [0.8, 0.2, 0],  # .2 * onehot(1) + .8 * onehot(pse 0), pseudo-label confident
                [0.7, 0, 0.3],  # .3 * onehot(2) + .7 * onehot(0), but unconfident -> dropped
                [1, 0, 0]]  # q >= .5 keeps label 0 even though its pseudo-label is 2
    torch.testing.assert_close(targets, torch.tensor(expected))
    assert keep.tolist() == [True, True, False, True]


def test_high_rate_tier_uses_confident_pseudo_labels_only():
    targets, keep = refine_targets(Y_HAT, Q, 0.4, Y_PSE, CONF, beta=0.4, num_classes=3)  # rate == beta
    assert targets.argmax(1).tolist() == [1, 0, 0, 2] and (targets.sum(1) == 1).all()
    assert keep.tolist() == [True, True, False, False]
    variant, keep_v = refine_targets(Y_HAT, Q, 0.9, Y_PSE, CONF, 0.4, 3, clean_keep_label=True)
    assert variant.argmax(1).tolist() == [0, 0, 0, 0]  # rows 0 and 3 (q >= .5) keep y_hat
    assert keep_v.tolist() == [True, True, False, True]


def test_selection_without_refining_and_masked_ce():
    targets, keep = select_targets(Y_HAT, Q, 3)
    assert targets.argmax(1).tolist() == Y_HAT.tolist() and keep.tolist() == [True, False, False, True]
    logits = torch.zeros(2, 2)  # CE of a uniform prediction is log 2 whatever the target
    loss = masked_soft_ce(logits, torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([True, False]))
    assert float(loss) == pytest.approx(np.log(2) / 2)  # one kept sample, divided by the batch of two


def test_ema_revision_formula():
    prev = {"w": torch.tensor([1.0, 2.0]), "steps": torch.tensor(3)}
    glob = {"w": torch.tensor([3.0, 6.0]), "steps": torch.tensor(7)}
    half = revise(prev, glob, gamma_g=0.5)
    assert half["w"].tolist() == [2.0, 4.0] and half["steps"].item() == 7
    quarter = revise(prev, glob, gamma_g=0.25)
    assert quarter["w"].tolist() == [2.5, 5.0]  # .25 * old + .75 * global
    assert prev["w"].tolist() == [1.0, 2.0]  # the previous teacher is not modified
    first = revise(None, glob, gamma_g=0.5)
    assert first["w"].tolist() == [3.0, 6.0] and first["w"].data_ptr() != glob["w"].data_ptr()


def test_local_ema_step_on_tensors_and_modules():
    ema = {"w": torch.tensor([0.0, 10.0])}
    ema_update_(ema, {"w": torch.tensor([10.0, 0.0])}, decay=0.9)
    torch.testing.assert_close(ema["w"], torch.tensor([1.0, 9.0]))
    teacher, student = nn.Linear(1, 1), nn.Linear(1, 1)
    with torch.no_grad():
        teacher.weight.fill_(1.0), teacher.bias.fill_(0.0), student.weight.fill_(3.0), student.bias.fill_(2.0)
    ema_step_(teacher, student, decay=0.75)
    assert teacher.weight.item() == pytest.approx(1.5) and teacher.bias.item() == pytest.approx(0.5)


def test_soft_pseudo_labels_replace_the_one_hot_by_the_global_softmax():
    probs = torch.tensor([[0.6, 0.3, 0.1], [0.1, 0.1, 0.8]])
    y_soft, confident = pseudo_labels(torch.log(probs), tau_conf=0.7, soft=True)
    torch.testing.assert_close(y_soft, probs)
    assert confident.tolist() == [False, True]
    # Low-rate tier, q = .25 on a noisy-looking sample: .25 * onehot(2) + .75 * softmax.
    targets, keep = refine_targets(torch.tensor([2, 2]), torch.tensor([0.25, 0.9]), 0.1, y_soft,
                                   torch.tensor([True, True]), beta=0.4, num_classes=3)
    torch.testing.assert_close(targets[0], torch.tensor([0.45, 0.225, 0.325]))
    torch.testing.assert_close(targets[1], torch.tensor([0.0, 0.0, 1.0]))
    # High-rate tier: the softmax itself.
    targets, _ = refine_targets(torch.tensor([2, 2]), torch.tensor([0.25, 0.9]), 0.5, y_soft,
                                torch.tensor([True, True]), beta=0.4, num_classes=3)
    torch.testing.assert_close(targets, probs)
