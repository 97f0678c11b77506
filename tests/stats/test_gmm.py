import numpy as np

from fedcore.stats.gmm import clean_posterior, noisy_fraction, zscore


def test_clean_is_lower_mean_component():
    # Prepare: 80 small losses around 0.1 and 20 large ones around 2.0, noisy ones listed first.
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(2.0, 0.1, 20), rng.normal(0.1, 0.05, 80)])
    # Execute
    q, means = clean_posterior(values, seed=0)
    # Assert: the clean component is the low one, whatever index sklearn gave it.
    assert means[0, 0] < means[1, 0]
    assert (q[20:] > 0.99).all() and (q[:20] < 0.01).all()
    assert noisy_fraction(q, "threshold") == 0.2
    assert abs(noisy_fraction(q, "mean") - 0.2) < 0.01


def test_degenerate_input_is_all_clean():
    q, _ = clean_posterior(np.full(5, 3.0), seed=0)
    assert q.tolist() == [1.0] * 5
    q, _ = clean_posterior(np.array([1.0]), seed=0)
    assert q.tolist() == [1.0]


def test_noisy_fraction_by_hand():
    q = np.array([1.0, 0.8, 0.2, 0.4])
    assert noisy_fraction(q, "mean") == (0.0 + 0.2 + 0.8 + 0.6) / 4
    assert noisy_fraction(q, "threshold") == 0.5


def test_zscore_constant_column():
    z = zscore(np.array([[1.0, 5.0], [3.0, 5.0]]))
    assert z.tolist() == [[-1.0, 0.0], [1.0, 0.0]]


def test_order_dim_and_standardize_2d():
    # Clean clients: low mu (dim 0); e (dim 1) on a different scale.
    x = np.array([[0.1, 100.0], [0.12, 110.0], [0.11, 105.0], [0.9, 900.0], [0.95, 950.0], [0.92, 920.0]])
    q, means = clean_posterior(x, seed=0, n_init=5, standardize=True, order_dim=0)
    assert (q[:3] > 0.5).all() and (q[3:] < 0.5).all()
    assert means[0, 0] < means[1, 0]
