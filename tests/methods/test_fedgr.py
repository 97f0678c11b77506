"""FedGR's pure pieces, checked by hand: surrogates, sieving, the cache, both tiers, the teacher."""

import numpy as np
import pytest
import torch
from torch import nn

from fedcore.methods.fedgr import warmup_length
from fedcore.stats.sieving import classwise_sieve, local_sieve, pooled_sieve, push_window, running_mean, window_mean
from fedcore.train import losses
from fedcore.train.ema import (
    ema_step_,
    ema_update_,
    ramped_decay,
    ramped_weights,
    revise,
    stacked_ema_update,
    teacher_reset,
)
from fedcore.train.refine import (
    EMPTY,
    batch_soft_targets,
    pseudo_labels,
    select_targets,
    tier_targets,
    update_cache,
    weighted_soft_ce,
)


def test_window_keeps_the_newest_t_obs_losses():
    w = push_window(None, np.array([1.0, 2.0]), t_obs=2)
    w = push_window(w, np.array([3.0, 4.0]), t_obs=2)
    assert w.tolist() == [[1.0, 3.0], [2.0, 4.0]]
    w = push_window(w, np.array([5.0, 6.0]), t_obs=2)
    assert w.tolist() == [[3.0, 5.0], [4.0, 6.0]]
    assert window_mean(w).tolist() == [4.0, 5.0]
    with pytest.raises(ValueError):
        push_window(w, np.array([1.0, 2.0, 3.0]), t_obs=2)


def test_running_mean_is_the_mean_of_every_visit():
    mean, count = running_mean(None, 0, np.array([2.0, 0.0]))
    mean, count = running_mean(mean, count, np.array([4.0, 3.0]))
    mean, count = running_mean(mean, count, np.array([0.0, 6.0]))
    assert count == 3 and mean.tolist() == [2.0, 3.0]  # (2+4+0)/3, (0+3+6)/3
    with pytest.raises(ValueError):
        running_mean(mean, count, np.array([1.0]))


def _two_clients():
    # Client 0: ten small losses (clean). Client 1: five small, then five large (noisy).
    rng = np.random.default_rng(0)
    low = lambda n: rng.normal(0.2, 0.05, n)  # noqa: E731
    return {0: low(10), 1: np.concatenate([low(5), rng.normal(3.0, 0.05, 5)])}


def test_pooled_sieve_clean_is_the_lower_mean_and_rates_by_hand():
    res = pooled_sieve(_two_clients(), seed=0)  # r_k = share of q < 0.5 (spec v2 default)
    assert (res.q[0] > 0.99).all()
    assert (res.q[1][:5] > 0.99).all() and (res.q[1][5:] < 0.01).all()
    assert res.rate == {0: 0.0, 1: 0.5}
    mu_clean, mu_noisy = res.means[-1]
    assert mu_clean == pytest.approx(0.2, abs=0.05) and mu_noisy == pytest.approx(3.0, abs=0.05)
    mean = pooled_sieve(_two_clients(), seed=0, estimator="mean")
    assert mean.rate[0] == pytest.approx(0.0, abs=0.01) and mean.rate[1] == pytest.approx(0.5, abs=0.01)


def test_local_sieve_cannot_see_a_client_that_is_all_noisy():
    # Client 1 holds only large losses. Pooled with the clean client 0 it is all noisy;
    # on its own the GMM splits its own losses in two, so about half look clean.
    rng = np.random.default_rng(1)
    lbar = {0: rng.normal(0.2, 0.05, 20), 1: rng.normal(3.0, 0.3, 20)}
    assert pooled_sieve(lbar, seed=0).rate == {0: 0.0, 1: 1.0}
    local = local_sieve(lbar, seed=0).rate
    assert 0.0 < local[0] < 1.0 and 0.0 < local[1] < 1.0


def test_classwise_sieve_splits_within_each_given_class():
    # Class 0 is well learnt (clean 0.2, wrong labels 1.0); class 1 is poorly learnt, so even its
    # correct labels cost 2.0 and its wrong ones 3.0. Pooled, the GMM flags class 1 whole and
    # keeps class 0's wrong labels; per class, exactly the 3 wrong labels of each class are flagged.
    rng = np.random.default_rng(0)
    noise = lambda n: rng.normal(0.0, 0.02, n)  # noqa: E731
    lbar = {0: np.r_[0.2 + noise(7), 1.0 + noise(3)], 1: np.r_[2.0 + noise(7), 3.0 + noise(3)]}
    labels = {0: np.zeros(10, int), 1: np.ones(10, int)}
    wrong = np.r_[np.zeros(7, bool), np.ones(3, bool)]
    pooled = pooled_sieve(lbar, seed=0)
    assert not (pooled.q[0] < 0.5).any() and (pooled.q[1] < 0.5).all()
    res = classwise_sieve(lbar, labels, seed=0)
    for c in (0, 1):
        assert ((res.q[c] < 0.5) == wrong).all(), c
    assert res.rate == {0: 0.3, 1: 0.3}
    assert res.means[0][0] == pytest.approx(0.2, abs=0.05) and res.means[1][1] == pytest.approx(3.0, abs=0.05)
    # the classes may be spread over clients in any way: the split follows the label, not the client
    mixed = {0: np.r_[lbar[0][:5], lbar[1][:5]], 1: np.r_[lbar[0][5:], lbar[1][5:]]}
    by_label = {0: np.r_[np.zeros(5, int), np.ones(5, int)], 1: np.r_[np.zeros(5, int), np.ones(5, int)]}
    q = classwise_sieve(mixed, by_label, seed=0).q
    assert ((q[0] < 0.5) == np.r_[wrong[:5], wrong[:5]]).all() and ((q[1] < 0.5) == np.r_[wrong[5:], wrong[5:]]).all()


def test_classwise_sieve_keeps_a_one_sample_class_clean_and_refuses_misaligned_labels():
    res = classwise_sieve({0: np.array([0.1, 0.2, 3.0, 5.0])}, {0: np.array([0, 0, 0, 1])}, seed=0)
    assert res.q[0][3] == 1.0
    with pytest.raises(ValueError, match="labels"):
        classwise_sieve({0: np.zeros(3)}, {0: np.zeros(2, int)}, seed=0)


def test_pseudo_labels_confidence_threshold():
    logits = torch.log(torch.tensor([[0.96, 0.02, 0.02], [0.5, 0.3, 0.2], [0.01, 0.01, 0.98]]))
    y, confident = pseudo_labels(logits, tau_conf=0.95)
    assert y.tolist() == [0, 0, 2] and confident.tolist() == [True, False, True]


# Four samples of one client: given labels, clean posteriors, this round's pseudo-labels.
Y_HAT = torch.tensor([0, 1, 2, 0])
Q = torch.tensor([0.9, 0.2, 0.3, 0.6])  # samples 1 and 2 are flagged (q < 0.5)
FLAGGED = Q < 0.5
Y_PSE = torch.tensor([1, 0, 0, 2])
CONF = torch.tensor([True, True, False, False])


def test_cache_modes_by_hand():
    old = torch.tensor([EMPTY, EMPTY, 1, 2])
    # trusted (authors): clean samples 0, 3 cache y_hat; flagged 1 its confident pseudo-label 0;
    # flagged 2 is unconfident and keeps what an earlier visit cached (1).
    assert update_cache(old, Y_HAT, FLAGGED, Y_PSE, CONF, "trusted").tolist() == [0, 0, 1, 0]
    # pseudo (spec v2 text): only flagged and confident samples change.
    assert update_cache(old, Y_HAT, FLAGGED, Y_PSE, CONF, "pseudo").tolist() == [EMPTY, 0, 1, 2]
    # none (v1): this round's confident pseudo-labels, any sample, no memory.
    assert update_cache(old, Y_HAT, FLAGGED, Y_PSE, CONF, "none").tolist() == [1, 0, EMPTY, EMPTY]
    assert old.tolist() == [EMPTY, EMPTY, 1, 2]  # the old cache is not modified


@pytest.mark.parametrize("mode", ["trusted", "pseudo"])
def test_cache_only_grows(mode):
    gen = torch.Generator().manual_seed(0)
    cache, covered = None, 0
    for _ in range(20):
        flagged = torch.rand(50, generator=gen) < 0.6
        confident = torch.rand(50, generator=gen) < 0.3
        y_hat, y_pse = (torch.randint(0, 10, (50,), generator=gen) for _ in range(2))
        new = update_cache(cache, y_hat, flagged, y_pse, confident, mode)
        if cache is not None:
            assert ((new >= 0) | (cache < 0)).all()  # no entry is ever emptied
        cache, n = new, int((new >= 0).sum())
        assert n >= covered
        covered = n
    assert 0 < covered <= 50


def test_low_tier_every_sample_softened_by_its_cached_label():
    cache = torch.tensor([0, 0, EMPTY, 0])  # the trusted cache of the example above, minus sample 2's entry
    t, w = tier_targets(Y_HAT, Q, rate=0.2, ref=cache, beta=0.8, num_classes=3, missing="zero")
    expected = [[1, 0, 0],  # clean, cached y_hat: .9 onehot(0) + .1 onehot(0)
                [0.8, 0.2, 0],  # .2 onehot(1) + .8 onehot(cached 0)
                [0, 0, 1],  # nothing cached: only q * CE(y_hat) remains -> weight q
                [1, 0, 0]]
    torch.testing.assert_close(t, torch.tensor(expected))
    torch.testing.assert_close(w, torch.tensor([1.0, 1.0, 0.3, 1.0]))
    _, w_given = tier_targets(Y_HAT, Q, 0.2, cache, 0.8, 3, missing="given")  # spec v2 text: y_cached := y_hat
    _, w_drop = tier_targets(Y_HAT, Q, 0.2, cache, 0.8, 3, missing="drop")
    assert w_given.tolist() == [1, 1, 1, 1] and w_drop.tolist() == [1, 1, 0, 1]


def test_low_tier_v1_keeps_clean_labels_and_softens_flagged_ones():
    ref = update_cache(None, Y_HAT, FLAGGED, Y_PSE, CONF, "none")  # [1, 0, -1, -1]
    t, w = tier_targets(Y_HAT, Q, 0.2, ref, 0.4, 3, missing="drop", soften_clean=False)
    torch.testing.assert_close(t, torch.tensor([[1, 0, 0], [0.8, 0.2, 0], [0, 0, 1], [1, 0, 0.0]]))
    assert w.tolist() == [1, 1, 0, 1]  # the unconfident flagged sample sits out


def test_high_tier_clean_keep_given_label_flagged_use_the_cache():
    cache = torch.tensor([0, 0, 1, 0])
    t, w = tier_targets(Y_HAT, Q, rate=0.8, ref=cache, beta=0.8, num_classes=3)  # rate == beta: high tier
    assert t.argmax(1).tolist() == [0, 0, 1, 0] and (t.sum(1) == 1).all()
    assert w.tolist() == [1, 1, 1, 1]
    empty = torch.tensor([EMPTY, EMPTY, EMPTY, EMPTY])
    t, w = tier_targets(Y_HAT, Q, 0.9, empty, 0.8, 3)
    assert t.argmax(1).tolist() == [0, 1, 2, 0] and w.tolist() == [1, 0, 0, 1]  # clean keep y_hat
    ref = update_cache(None, Y_HAT, FLAGGED, Y_PSE, CONF, "none")  # v1: every sample on its pseudo-label
    t, w = tier_targets(Y_HAT, Q, 0.9, ref, 0.4, 3, missing="drop", soften_clean=False, clean_given=False)
    assert t.argmax(1)[w > 0].tolist() == [1, 0] and w.tolist() == [1, 1, 0, 0]


def test_selection_without_refining_and_weighted_ce():
    targets, w = select_targets(Y_HAT, Q, 3)
    assert targets.argmax(1).tolist() == Y_HAT.tolist() and w.tolist() == [1, 0, 0, 1]
    _, w_q = select_targets(Y_HAT, Q, 3, weighted=True)
    torch.testing.assert_close(w_q, Q)
    logits = torch.zeros(2, 2)  # CE of a uniform prediction is log 2 whatever the target
    loss = weighted_soft_ce(logits, torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([1.0, 0.5]))
    assert float(loss) == pytest.approx(1.5 * np.log(2) / 2)  # (1 + .5) log 2, over the batch of two


def test_ema_revision_formula():
    prev = {"w": torch.tensor([1.0, 2.0]), "steps": torch.tensor(3)}
    glob = {"w": torch.tensor([3.0, 6.0]), "steps": torch.tensor(7)}
    rev = revise(prev, glob, gamma_g=0.9)
    torch.testing.assert_close(rev["w"], torch.tensor([1.2, 2.4]))  # .9 * old + .1 * global
    assert rev["steps"].item() == 7
    quarter = revise(prev, glob, gamma_g=0.25)
    assert quarter["w"].tolist() == [2.5, 5.0]
    assert prev["w"].tolist() == [1.0, 2.0]  # the previous teacher is not modified
    first = revise(None, glob, gamma_g=0.9)
    assert first["w"].tolist() == [3.0, 6.0] and first["w"].data_ptr() != glob["w"].data_ptr()


def test_teacher_reset_rule():
    assert teacher_reset(rate=0.9, coverage=0.4, beta=0.8, min_coverage=0.5)
    assert not teacher_reset(rate=0.9, coverage=0.5, beta=0.8, min_coverage=0.5)  # cache covers half
    assert not teacher_reset(rate=0.8, coverage=0.0, beta=0.8, min_coverage=0.5)  # not above beta
    assert not teacher_reset(rate=1.0, coverage=0.0, beta=0.8, min_coverage=0.0)  # v1: never


def test_ramped_ema_decay():
    assert [ramped_decay(s, 0.99) for s in (0, 1, 3, 9)] == [0.0, 0.5, 0.75, pytest.approx(0.9)]
    assert ramped_decay(98, 0.99) == pytest.approx(0.98990, abs=1e-5)
    assert ramped_decay(99, 0.99) == 0.99 and ramped_decay(10_000, 0.99) == 0.99
    with pytest.raises(ValueError):
        ramped_decay(-1, 0.99)


def test_local_ema_step_on_tensors_and_modules():
    ema = {"w": torch.tensor([0.0, 10.0])}
    ema_update_(ema, {"w": torch.tensor([10.0, 0.0])}, decay=0.9)
    torch.testing.assert_close(ema["w"], torch.tensor([1.0, 9.0]))
    teacher, student = nn.Linear(1, 1), nn.Linear(1, 1)
    with torch.no_grad():
        teacher.weight.fill_(1.0), teacher.bias.fill_(0.0), student.weight.fill_(3.0), student.bias.fill_(2.0)
    ema_step_(teacher, student, decay=0.75)
    assert teacher.weight.item() == pytest.approx(1.5) and teacher.bias.item() == pytest.approx(0.5)


def test_embedding_kl_is_zero_when_local_equals_global():
    f = torch.tensor([[0.0, 1.0, 2.0], [3.0, 0.0, 0.5]])
    assert float(losses.kd_kl(f, f, T=0.5)) == pytest.approx(0.0, abs=1e-7)
    g = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # uniform target
    # KL(uniform || softmax(f / .5)) on row 0: log-sum-exp(0, 2, 4) - mean(0, 2, 4) - log 3
    row0 = np.log(np.exp([0, 2, 4]).sum()) - 2.0 - np.log(3)
    assert float(losses.kd_kl(f[:1], g[:1], T=0.5)) == pytest.approx(row0, rel=1e-5)


def test_warmup_length_passes_or_rounds_never_under_one_pass():
    assert warmup_length(rounds_per_pass=1, passes=10, rounds=None) == 10  # 20 clients, all per round
    assert warmup_length(rounds_per_pass=10, passes=10, rounds=None) == 100  # the authors' 10% of 100
    assert warmup_length(rounds_per_pass=10, passes=10, rounds=35) == 35  # the rounds cap comes first
    assert warmup_length(rounds_per_pass=4, passes=10, rounds=2) == 4  # every client before sieving


@pytest.mark.parametrize("ramp", [True, False])
def test_stacked_ema_rows_equal_the_scalar_update_bit_for_bit(ramp):
    """Row k of the stacked update is ema_update_ at row k's own (ramped) decay, to the last bit."""
    gen = torch.Generator().manual_seed(0)
    steps = torch.tensor([0.0, 1.0, 5.0, 150.0], dtype=torch.float64)
    ema = {"w": torch.randn(4, 3, 2, generator=gen), "n": torch.zeros(4, dtype=torch.long)}
    src = {"w": torch.randn(4, 3, 2, generator=gen), "n": torch.arange(4)}
    before = ema["w"].clone()
    w = ramped_weights(steps, 0.99, ramp)
    assert w.tolist() == [1.0 - (ramped_decay(int(s), 0.99) if ramp else 0.99) for s in steps]
    out = stacked_ema_update(ema, src, w.to(torch.float32))
    for k in range(4):
        row = {"w": ema["w"][k].clone(), "n": ema["n"][k].clone()}
        ema_update_(row, {"w": src["w"][k], "n": src["n"][k]}, ramped_decay(int(steps[k]), 0.99) if ramp else 0.99)
        assert torch.equal(out["w"][k], row["w"]) and out["n"][k] == row["n"]
    assert torch.equal(ema["w"], before)  # a new dict: the input is left as it was


def test_batch_soft_targets_reproduce_the_authors_broadcast_by_hand():
    # Prepare: 2 samples, 2 classes, uniform logits (every CE = log 2); q = (1, 0); sample 0 has
    # its given label cached, sample 1 nothing (-1, the authors' ignored index).
    logits = torch.zeros(2, 2)
    y_hat, q, ref = torch.tensor([0, 1]), torch.tensor([1.0, 0.0]), torch.tensor([0, EMPTY])
    # Execute
    targets, weights = batch_soft_targets(y_hat, q, ref, 2)
    loss = weighted_soft_ce(logits, targets, weights)
    # Assert: every sample weighs mean(q) = 0.5. Sample 0: 0.5 CE(y_hat) + 0.5 CE(ref) = log 2;
    # sample 1: 0.5 CE(y_hat) + 0 = 0.5 log 2; mean over B = 0.75 log 2 (per-sample q would give 0.5 log 2).
    assert weights.tolist() == [1.0, 0.5]
    assert loss.item() == pytest.approx(0.75 * np.log(2))
    per_sample = weighted_soft_ce(logits, *tier_targets(y_hat, q, 0.0, ref, 0.8, 2))
    assert per_sample.item() == pytest.approx(0.5 * np.log(2))
    # ... and equal the authors' expression on random logits: (CE_hat * c[:, None] + CE_pse * (1 - c[:, None])).mean()
    g = torch.Generator().manual_seed(0)
    logits, y_hat = torch.randn(6, 3, generator=g), torch.tensor([0, 1, 2, 0, 1, 2])
    q, ref = torch.rand(6, generator=g), torch.tensor([0, EMPTY, 1, EMPTY, 1, 2])
    ce_hat = torch.nn.functional.cross_entropy(logits, y_hat, reduction="none")
    ce_pse = torch.nn.functional.cross_entropy(logits, ref, ignore_index=EMPTY, reduction="none")
    theirs = (ce_hat * q[:, None] + ce_pse * (1.0 - q[:, None])).mean()
    ours = weighted_soft_ce(logits, *batch_soft_targets(y_hat, q, ref, 3))
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)
