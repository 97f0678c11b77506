"""clean_posterior(order_dim=None): components ordered by the sum of their means."""

import numpy as np

from fedcore.stats.gmm import clean_posterior


def test_sum_order_can_disagree_with_first_dim():
    # Cluster a sits at (0, 10), cluster b at (1, 0): lower on dim 0 is a, lower in sum is b.
    rng = np.random.default_rng(0)
    a = np.array([0.0, 10.0]) + 0.01 * rng.standard_normal((5, 2))
    b = np.array([1.0, 0.0]) + 0.01 * rng.standard_normal((5, 2))
    x = np.vstack([a, b])
    q_dim0, _ = clean_posterior(x, seed=0, order_dim=0)
    q_sum, means = clean_posterior(x, seed=0, order_dim=None)
    assert np.all(q_dim0[:5] > 0.99) and np.all(q_dim0[5:] < 0.01)
    assert np.all(q_sum[5:] > 0.99) and np.all(q_sum[:5] < 0.01)
    np.testing.assert_allclose(means[0], [1.0, 0.0], atol=0.05)
