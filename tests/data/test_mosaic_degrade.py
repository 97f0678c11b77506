"""digits_mosaic's degraded-tile option (occlude, pixel_noise): off by default, labels and truth
untouched, half tiles blanked by hand-checkable masks."""

from __future__ import annotations

import numpy as np
import pytest

from fedcore.config import DataConfig
from fedcore.data.datasets import load_dataset
from fedcore.data.mosaic import degrade
from fedcore.errors import ConfigError

SMALL = {"n_train": 200, "n_test": 50}


def _load(**params):
    return load_dataset(DataConfig(name="digits_mosaic", params={**SMALL, **params}))


def test_defaults_leave_images_untouched():
    plain = _load()
    zero = _load(occlude=0.0, pixel_noise=0.0)
    np.testing.assert_array_equal(plain.x_train, zero.x_train)
    imgs = np.arange(2 * 256, dtype=np.uint8).reshape(2, 1, 16, 16)
    assert degrade(imgs, np.zeros((2, 4), dtype=np.int64), 0.0, 0.0, np.random.default_rng(0)) is imgs


def test_degradation_changes_images_only():
    plain, hard = _load(), _load(occlude=0.5, pixel_noise=40)
    np.testing.assert_array_equal(plain.y_train, hard.y_train)
    np.testing.assert_array_equal(plain.y_test, hard.y_test)
    np.testing.assert_array_equal(plain.extras["true_corr"], hard.extras["true_corr"])
    assert (plain.x_train != hard.x_train).mean() > 0.3 and (plain.x_test != hard.x_test).mean() > 0.3
    assert hard.extras["occlude"] == 0.5 and hard.extras["pixel_noise"] == 40


def test_occlusion_blanks_one_half_of_digit_tiles_and_never_blank_tiles():
    imgs = np.full((50, 1, 16, 16), 200, dtype=np.uint8)
    tiles = np.tile(np.array([3, -1, 5, 7]), (50, 1))
    out = degrade(imgs, tiles, 1.0, 0.0, np.random.default_rng(1))
    for i in range(50):
        for t in (0, 2, 3):
            r, c = (t // 2) * 8, (t % 2) * 8
            patch = out[i, 0, r:r + 8, c:c + 8]
            assert (patch == 0).sum() == 32  # exactly one half
            halves = [patch[:4], patch[4:], patch[:, :4], patch[:, 4:]]
            assert sum(bool((h == 0).all()) for h in halves) == 1
        assert (out[i, 0, :8, 8:] == 200).all()  # tile 1 is blank: not a digit, left alone


def test_pixel_noise_has_the_requested_spread():
    imgs = np.full((20, 1, 16, 16), 128, dtype=np.uint8)
    out = degrade(imgs, np.zeros((20, 4), dtype=np.int64), 0.0, 20.0, np.random.default_rng(2))
    assert out.dtype == np.uint8
    assert abs(out.astype(float).std() - 20.0) < 1.5 and abs(out.astype(float).mean() - 128) < 1.5


def test_bad_degradation_is_refused():
    with pytest.raises(ConfigError, match="occlude"):
        _load(occlude=1.5)
    with pytest.raises(ConfigError, match="pixel_noise"):
        _load(pixel_noise=-1)
