"""DaAgg weights and nearest-clean distances, by hand."""

import math

import numpy as np
import pytest
import torch

from fedcore.stats.daagg import daagg_weights, nearest_clean_distances
from fedcore.train.params import flat_distance, per_tensor_distance


def test_nearest_clean_distance_uses_the_closest_clean_client():
    models = [0.0, 3.0, 10.0, 4.0]
    d = nearest_clean_distances(models, [True, False, False, True], lambda a, b: abs(a - b))
    np.testing.assert_allclose(d, [0.0, 1.0, 6.0, 0.0])


def test_no_clean_client_means_no_distances():
    np.testing.assert_array_equal(nearest_clean_distances([1.0, 5.0], [False, False], lambda a, b: abs(a - b)), [0, 0])


def test_daagg_weights_by_hand():
    w = daagg_weights([10, 20, 30], [0.0, 1.0, 2.0])  # scaled distances 0, 0.5, 1
    raw = np.array([10.0, 20.0 * math.exp(-0.5), 30.0 * math.exp(-1.0)])
    np.testing.assert_allclose(w, raw / raw.sum())
    assert w.sum() == pytest.approx(1.0)


def test_daagg_weights_do_not_depend_on_the_distance_scale():
    np.testing.assert_allclose(daagg_weights([5, 5], [0.0, 2.0]), daagg_weights([5, 5], [0.0, 2000.0]))


def test_zero_distances_give_fedavg_weights():
    np.testing.assert_allclose(daagg_weights([1, 3], [0.0, 0.0]), [0.25, 0.75])


def test_with_parameter_dicts_and_buffers():
    clean = {"w": torch.zeros(2), "bn.running_mean": torch.zeros(1)}
    noisy = {"w": torch.tensor([3.0, 0.0]), "bn.running_mean": torch.tensor([4.0])}
    d = nearest_clean_distances([clean, noisy], [True, False], flat_distance)
    np.testing.assert_allclose(d, [0.0, 5.0])  # buffers count: sqrt(3^2 + 4^2)


def test_per_tensor_distance_sums_tensor_norms_on_two_models():
    """FedNoRo's code: sum over tensors of ||a_t - b_t||, integer buffers skipped."""
    a = {"fc.weight": torch.zeros(2, 2), "fc.bias": torch.zeros(1), "bn.num_batches_tracked": torch.tensor(0)}
    b = {"fc.weight": torch.tensor([[3.0, 0.0], [0.0, 4.0]]), "fc.bias": torch.tensor([2.0]),
         "bn.num_batches_tracked": torch.tensor(9)}
    assert per_tensor_distance(a, b) == pytest.approx(5.0 + 2.0)
    assert flat_distance(a, b) == pytest.approx(math.sqrt(9 + 16 + 4))
    d = nearest_clean_distances([a, b, a], [True, False, True], per_tensor_distance)
    np.testing.assert_allclose(d, [0.0, 7.0, 0.0])
