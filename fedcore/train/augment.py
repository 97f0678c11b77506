"""Batched augmentation on the input's device, with every random draw from an explicit generator.

Inputs and outputs are float batches (B, C, H, W) with values in [0, 1], i.e. uint8 / 255
before normalization: photometric ops (solarize, posterize, colour jitter) are defined on
that range, so normalize with the dataset mean/std *after* augmenting.

Each sample gets its own random parameters, applied with batched ops (integer-shift
gathers, one affine `grid_sample`, masked blends) instead of a Python loop over samples.
A generator on `x.device` keeps everything there; with a CPU generator only the small
parameter tensors are copied over. The primitives live in `augment_ops`, SimCLR's views in
`simclr_aug`; `Augmenter` serves all three kinds of view.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torchvision.transforms.v2 import functional as TF

from fedcore.train.augment_ops import Gen, blend, coin, gray, per_sample, rand, sign, warp
from fedcore.train.simclr_aug import simclr_views


def random_crop(x: torch.Tensor, gen: Gen, pad: int) -> torch.Tensor:
    """Zero-pad by `pad` and crop back at a random offset per sample (exact integer shift)."""
    b, c, h, w = x.shape
    xp = F.pad(x, (pad, pad, pad, pad))
    off = (rand(gen, (2, b), x.device) * (2 * pad + 1)).long().clamp(max=2 * pad)
    rows = off[0][:, None] + torch.arange(h, device=x.device)
    cols = off[1][:, None] + torch.arange(w, device=x.device)
    xp = xp.gather(2, rows[:, None, :, None].expand(b, c, h, w + 2 * pad))
    return xp.gather(3, cols[:, None, None, :].expand(b, c, h, w))


def random_hflip(x: torch.Tensor, gen: Gen, p: float = 0.5) -> torch.Tensor:
    return torch.where(per_sample(coin(gen, x.shape[0], p, x.device)), x.flip(-1), x)


def weak(
    x: torch.Tensor, gen: Gen, flip: bool = True, pad: int | None = None, brightness: float = 0.05
) -> torch.Tensor:
    """Random shift (pad, default side // 8) + optional horizontal flip + tiny brightness jitter."""
    pad = max(1, min(x.shape[-2:]) // 8) if pad is None else pad
    x = random_crop(x, gen, pad) if pad > 0 else x
    if flip:
        x = random_hflip(x, gen)
    if brightness > 0:
        x = blend(
            x, torch.zeros_like(x), rand(gen, (x.shape[0],), x.device, 1 - brightness, 1 + brightness)
        )
    return x


GEOMETRIC = ("rotate", "shear_x", "shear_y", "translate_x", "translate_y")
PHOTOMETRIC = (
    "brightness",
    "color",
    "contrast",
    "sharpness",
    "posterize",
    "solarize",
    "autocontrast",
    "equalize",
)


def _affine_theta(act: dict[str, torch.Tensor], sign: torch.Tensor) -> torch.Tensor:
    """(B, 2, 3) theta for affine_grid from per-sample signed magnitudes (0 = op not drawn).

    Ranges follow FixMatch's RandAugment at magnitude 1: 30 degrees, shear 0.3, shift 0.3.
    """
    ang = math.radians(30) * act["rotate"] * sign[0]
    cos, sin = torch.cos(ang), torch.sin(ang)
    sx, sy = 0.3 * act["shear_x"] * sign[1], 0.3 * act["shear_y"] * sign[2]
    rot = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)
    one = torch.ones_like(sx)
    shear = torch.stack([torch.stack([one, sx], -1), torch.stack([sy, one + sx * sy], -1)], -2)
    # Normalized coordinates span 2, so a shift of 0.3 image widths is 0.6.
    shift = torch.stack([0.6 * act["translate_x"] * sign[3], 0.6 * act["translate_y"] * sign[4]], -1)
    return torch.cat([rot @ shear, shift[..., None]], -1)


def _sharpen_base(x: torch.Tensor) -> torch.Tensor:
    # PIL's SMOOTH kernel: the image that ImageEnhance.Sharpness blends away from.
    k = torch.ones(3, 3, dtype=x.dtype, device=x.device)
    k[1, 1] = 5.0
    k = (k / 13.0).expand(x.shape[1], 1, 3, 3)
    return F.conv2d(F.pad(x, (1, 1, 1, 1), mode="replicate"), k, groups=x.shape[1])


def _photometric(x: torch.Tensor, op: str, m: torch.Tensor, sign: torch.Tensor) -> torch.Tensor:
    """Apply `op` to the whole batch with per-sample magnitude m in [0, 1]."""
    enhance = 1.0 + 0.9 * m * sign  # PIL enhance factor in [0.1, 1.9]
    if op == "brightness":
        return blend(x, torch.zeros_like(x), enhance)
    if op == "color":
        return blend(x, gray(x).expand_as(x), enhance)
    if op == "contrast":
        return blend(x, gray(x).mean((1, 2, 3), keepdim=True).expand_as(x), enhance)
    if op == "sharpness":
        return blend(x, _sharpen_base(x), enhance)
    if op == "posterize":
        step = per_sample(2.0 ** torch.round(4 * m))  # keep 8..4 bits
        return torch.floor(x * 255.0 / step) * step / 255.0
    if op == "solarize":
        return torch.where(x > per_sample(1.0 - m), 1.0 - x, x)
    if op == "autocontrast":
        return TF.autocontrast(x)
    if op == "equalize":
        return TF.equalize(x)
    raise ValueError(f"unknown op {op!r}")


def cutout(x: torch.Tensor, gen: Gen, frac: float, fill: float = 0.5) -> torch.Tensor:
    """Fill a square of random side in [1, frac * min(H, W)] at a random centre per sample."""
    b, _, h, w = x.shape
    side = 1 + rand(gen, (b,), x.device) * max(frac * min(h, w) - 1, 0.0)
    cy, cx = rand(gen, (b,), x.device, 0, h), rand(gen, (b,), x.device, 0, w)
    ys = torch.arange(h, device=x.device, dtype=x.dtype) + 0.5
    xs = torch.arange(w, device=x.device, dtype=x.dtype) + 0.5
    in_y = (ys[None, :] - cy[:, None]).abs() <= side[:, None] / 2
    in_x = (xs[None, :] - cx[:, None]).abs() <= side[:, None] / 2
    box = (in_y[:, :, None] & in_x[:, None, :])[:, None]
    return torch.where(box, torch.full_like(x, fill), x)


# Sharpness blends towards a conv2d, and oneDNN's result for an image can change in the last
# bit with the number of images convolved with it: it keeps running over the whole batch.
_WHOLE_BATCH = ("sharpness",)


def _on_rows(x: torch.Tensor, rows: torch.Tensor, fn, gather: bool) -> torch.Tensor:
    """x with fn applied to the samples where `rows` (B,) is True; fn(v, idx) gets v = x[idx].

    gather: run fn on those samples only. The ops run this way work per sample with
    elementwise or per-image arithmetic, so a row comes out as from a whole-batch call (a
    test checks it bit for bit); with 2 ops drawn from 12, an op is drawn by 1 sample in 6.
    Otherwise fn runs over the whole batch (idx = all) and torch.where keeps the rows: the
    gather needs the row count on the host, which is a sync per op on an accelerator.
    """
    if not gather:
        return torch.where(per_sample(rows), fn(x, slice(None)), x)
    idx = rows.nonzero().squeeze(1)
    if idx.numel() == 0:
        return x
    return x.index_copy(0, idx, fn(x.index_select(0, idx), idx))


def strong(
    x: torch.Tensor,
    gen: Gen,
    flip: bool = True,
    num_ops: int = 2,
    magnitude: float = 1.0,
    cutout_frac: float = 0.5,
    pad: int | None = None,
) -> torch.Tensor:
    """FixMatch-style strong view: weak shift/flip, then `num_ops` ops drawn per sample from
    RandAugment's list with per-sample magnitudes U(0, magnitude), then cutout.

    Ops apply in a fixed order (geometric, then photometric) rather than the drawn order, so
    each op runs once per batch, on the samples that drew it; drawing the same op twice keeps
    the larger magnitude.
    """
    x = weak(x, gen, flip=flip, pad=pad, brightness=0.0)
    b, dev = x.shape[0], x.device
    ops = GEOMETRIC + tuple(o for o in PHOTOMETRIC if x.shape[1] == 3 or o != "color")
    pick = (rand(gen, (b, num_ops), dev) * len(ops)).long().clamp(max=len(ops) - 1)
    mag = rand(gen, (b, num_ops), dev, 0.0, magnitude)
    onehot = F.one_hot(pick, len(ops)).to(x.dtype)  # (B, num_ops, K)
    act = (onehot * mag[..., None]).amax(1)  # (B, K): magnitude, 0 where not drawn
    chosen = onehot.amax(1) > 0
    signs = torch.stack([sign(gen, b, dev) for _ in ops])  # (K, B)
    k_geo = len(GEOMETRIC)
    theta = _affine_theta({o: act[:, i] for i, o in enumerate(GEOMETRIC)}, signs[:k_geo])
    gather = dev.type == "cpu"
    x = _on_rows(x, chosen[:, :k_geo].any(1), lambda v, idx: warp(v, theta[idx]), gather)
    for i, op in enumerate(ops[k_geo:], start=k_geo):
        x = _on_rows(x, chosen[:, i], lambda v, idx, i=i, op=op: _photometric(v, op, act[idx, i], signs[i, idx]),
                     gather and op not in _WHOLE_BATCH)
    return cutout(x, gen, cutout_frac) if cutout_frac > 0 else x


@dataclass(frozen=True)
class Augmenter:
    """Augmentation policy for one dataset; methods call `aug.weak(x, gen)` and friends.

    flip_ok must be False where a mirror changes the label or makes an unnatural image
    (digits, text). pad None = side // 8 (4 px on 32x32, 1 px on 8x8).
    """

    channels: int
    size: int
    flip_ok: bool = True
    pad: int | None = None
    strong_ops: int = 2
    strong_magnitude: float = 1.0
    cutout: float = 0.5
    simclr_min_scale: float = 0.2
    simclr_strength: float = 0.5

    @property
    def _pad(self) -> int:
        return max(1, self.size // 8) if self.pad is None else self.pad

    def _check(self, x: torch.Tensor) -> None:
        if x.ndim != 4 or x.shape[1] != self.channels:
            raise ValueError(
                f"expected (B, {self.channels}, H, W) float batch in [0, 1], got {tuple(x.shape)}"
            )

    @classmethod
    def for_dataset(cls, meta: dict, in_shape: tuple[int, int, int]) -> Augmenter:
        """The policy for a FederatedDataset: its channels, image side and `flip_ok` flag."""
        return cls(channels=in_shape[0], size=in_shape[-1], flip_ok=bool(meta.get("flip_ok", False)))

    def weak(self, x: torch.Tensor, gen: Gen) -> torch.Tensor:
        self._check(x)
        return weak(x, gen, flip=self.flip_ok, pad=self._pad)

    def strong(self, x: torch.Tensor, gen: Gen) -> torch.Tensor:
        self._check(x)
        return strong(x, gen, self.flip_ok, self.strong_ops, self.strong_magnitude, self.cutout, self._pad)

    def simclr_views(self, x: torch.Tensor, gen: Gen) -> tuple[torch.Tensor, torch.Tensor]:
        self._check(x)
        return simclr_views(x, gen, self.flip_ok, self.simclr_min_scale, self.simclr_strength)
