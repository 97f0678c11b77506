"""Batched augmentation: shapes, determinism per generator, strength ordering, no flips for digits."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fedcore.train import augment as A
from fedcore.train import simclr_aug as S

CIFAR = A.Augmenter(channels=3, size=16, flip_ok=True)
DIGITS = A.Augmenter(channels=1, size=8, flip_ok=False)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def smooth_batch(b: int, c: int, size: int, seed: int = 0) -> torch.Tensor:
    """Low-frequency images in [0, 1], so that shifting them changes little."""
    coarse = torch.rand(b, c, 4, 4, generator=gen(seed))
    return F.interpolate(coarse, size=(size, size), mode="bilinear", align_corners=False)


def left_bar(b: int, size: int) -> torch.Tensor:
    """A bright column near the left edge: mirroring moves it to the right half."""
    x = torch.zeros(b, 1, size, size)
    x[..., 1] = 1.0
    return x


def views(aug: A.Augmenter, x: torch.Tensor, seed: int) -> list[torch.Tensor]:
    return [aug.weak(x, gen(seed)), aug.strong(x, gen(seed)), *aug.simclr_views(x, gen(seed))]


@pytest.mark.parametrize("aug", [CIFAR, DIGITS], ids=["rgb16", "digits8"])
def test_shape_dtype_device_and_range_preserved(aug: A.Augmenter):
    x = smooth_batch(4, aug.channels, aug.size)

    outs = views(aug, x, seed=0)

    for out in outs:
        assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
        assert out.min() >= 0.0 and out.max() <= 1.0


@pytest.mark.parametrize("aug", [CIFAR, DIGITS], ids=["rgb16", "digits8"])
def test_same_generator_same_output_other_generator_differs(aug: A.Augmenter):
    x = smooth_batch(8, aug.channels, aug.size)
    torch.manual_seed(0)
    global_state = torch.get_rng_state()

    first, again, other = views(aug, x, 1), views(aug, x, 1), views(aug, x, 2)

    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert all(not torch.equal(a, b) for a, b in zip(first, other, strict=True))
    assert torch.equal(torch.get_rng_state(), global_state)  # nothing drawn from the global RNG


def test_two_simclr_views_differ():
    v1, v2 = CIFAR.simclr_views(smooth_batch(4, 3, 16), gen(0))

    assert not torch.equal(v1, v2)


def test_strong_changes_images_more_than_weak():
    # Without mirroring, which dominates both gaps on random images.
    aug = A.Augmenter(channels=3, size=16, flip_ok=False)
    x = smooth_batch(64, 3, 16)

    weak_gap = (aug.weak(x, gen(0)) - x).abs().mean()
    strong_gap = (aug.strong(x, gen(0)) - x).abs().mean()

    assert strong_gap > 1.2 * weak_gap


def test_random_crop_is_an_exact_shift():
    x = smooth_batch(8, 1, 8)
    padded = F.pad(x, (1, 1, 1, 1))
    shifts = [padded[..., dy : dy + 8, dx : dx + 8] for dy in range(3) for dx in range(3)]

    out = A.random_crop(x, gen(0), pad=1)

    for i in range(8):
        assert any(torch.equal(out[i], s[i]) for s in shifts)


def _right_heavy(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x[..., half:].sum((1, 2, 3)) > x[..., :half].sum((1, 2, 3))


def test_digits_are_never_mirrored():
    x = left_bar(64, 8)
    flipping = A.Augmenter(channels=1, size=8, flip_ok=True, strong_magnitude=0.0, cutout=0.0)
    no_flip = A.Augmenter(
        channels=1, size=8, flip_ok=False, strong_magnitude=0.0, cutout=0.0, simclr_min_scale=1.0
    )
    # Magnitude 0, no cutout and full-area crops leave mirroring as the only way to move the bar right.
    kept = views(no_flip, x, 0)
    mirrored = views(flipping, x, 0)

    assert not any(_right_heavy(v).any() for v in kept)
    assert all(_right_heavy(v).any() for v in mirrored[:2])


def test_cutout_fills_one_square_and_nothing_else():
    x = torch.zeros(16, 1, 8, 8)

    out = A.cutout(x, gen(0), frac=0.5, fill=0.5)

    for img in out[:, 0]:
        rows, cols = torch.nonzero(img).unbind(1)
        assert set(img.unique().tolist()) <= {0.0, 0.5}
        assert len(rows) == (rows.max() - rows.min() + 1) * (cols.max() - cols.min() + 1) <= 16


def test_hue_rotation_by_a_third_turn_maps_red_to_green_and_keeps_grey():
    red = torch.zeros(1, 3, 1, 1)
    red[:, 0] = 1.0
    grey = torch.full((1, 3, 1, 1), 0.4)

    assert torch.allclose(
        S.hue_rotate(red, torch.tensor([1 / 3])).flatten(), torch.tensor([0.0, 1.0, 0.0]), atol=1e-6
    )
    assert torch.allclose(S.hue_rotate(grey, torch.tensor([0.123])), grey, atol=1e-6)


def test_affine_theta_is_identity_when_no_geometric_op_is_drawn():
    zeros = {op: torch.zeros(2) for op in A.GEOMETRIC}
    rot = {**zeros, "rotate": torch.tensor([1.0, 0.0])}

    theta = A._affine_theta(zeros, torch.ones(5, 2))
    turned = A._affine_theta(rot, torch.ones(5, 2))

    assert torch.equal(theta, torch.eye(2, 3).expand(2, 2, 3))
    c, s = math.cos(math.radians(30)), math.sin(math.radians(30))
    assert torch.allclose(turned[0], torch.tensor([[c, -s, 0.0], [s, c, 0.0]]))


def test_wrong_channel_count_is_rejected():
    with pytest.raises(ValueError, match=r"expected \(B, 1, H, W\)"):
        DIGITS.weak(torch.zeros(2, 3, 8, 8), gen(0))


def _whole_batch_reference():
    """The earlier `strong`, every op over the whole batch (benchmarks/augment_throughput.py)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "augment_throughput.py"
    spec = importlib.util.spec_from_file_location("augment_throughput", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.strong_whole_batch


@pytest.mark.parametrize(("b", "c", "size", "num_ops"), [(32, 1, 28, 2), (7, 3, 16, 2), (5, 1, 8, 3), (1, 3, 8, 1)])
def test_strong_on_the_drawing_rows_only_equals_the_whole_batch_form_bit_for_bit(b, c, size, num_ops):
    reference = _whole_batch_reference()
    for seed in range(12):
        x = torch.rand(b, c, size, size, generator=gen(100 + seed))
        got = A.strong(x, gen(seed), num_ops=num_ops)
        assert torch.equal(got, reference(x, gen(seed), num_ops=num_ops)), seed
        assert not torch.equal(got, x)  # the views do change the images

