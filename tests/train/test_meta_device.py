"""Pure-torch training helpers keep their outputs on the input's device.

Inputs live on the 'meta' device, which stands in for CUDA: a helper that builds a tensor
without `device=` (or draws random numbers on the CPU without moving them) fails here as it
would on a GPU. Generators are CPU ones, as `engine.sampler.client_rngs` makes them.
"""

from __future__ import annotations

import pytest
import torch

from fedcore.stats.correlation import alignment_gap, phi_correlation
from fedcore.train import augment as A
from fedcore.train import losses
from fedcore.train.ema import revise
from fedcore.train.mixmatch import mixmatch_loss, refine_labels
from fedcore.train.params import weighted_average
from fedcore.train.refine import pseudo_labels, tier_targets, update_cache, weighted_soft_ce

META = torch.device("meta")
B, C = 6, 4


def m(*shape, dtype=torch.float32) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device=META)


def _flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for v in out.values() for t in _flat(v)]
    return [t for v in out for t in _flat(v)]


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("view", ["weak", "strong", "simclr_views"])
def test_augmentations_stay_on_the_input_device_with_a_cpu_generator(channels, view):
    aug = A.Augmenter(channels=channels, size=8, flip_ok=True)
    out = getattr(aug, view)(m(4, channels, 8, 8), torch.Generator().manual_seed(0))
    assert {t.device for t in _flat(out)} == {META}


CASES = {
    "sce": lambda: losses.sce(m(B, C), m(B, dtype=torch.long)),
    "la_kd_masked": lambda: losses.la_kd(m(B, C), m(B, C), m(B, dtype=torch.long), m(C), 0.5,
                                         kd_mask=m(B, dtype=torch.bool)),
    "forward_corrected_nll": lambda: losses.forward_corrected_nll(m(B, C), m(B, dtype=torch.long), m(C, C)),
    "nt_xent": lambda: losses.nt_xent(m(B, 8), m(B, 8)),
    "mixup_inputs": lambda: losses.mixup_inputs(m(B, C), m(B, dtype=torch.long), 0.3, m(B, dtype=torch.long)),
    "mixmatch_loss": lambda: mixmatch_loss(m(B, C), m(B, C), 2, 1.0),
    "refine_labels": lambda: refine_labels(m(B, dtype=torch.long), m(B), m(B, C), 0.5),
    "pseudo_labels": lambda: pseudo_labels(m(B, C), 0.9),
    "update_cache": lambda: update_cache(m(B, dtype=torch.long), m(B, dtype=torch.long), m(B, dtype=torch.bool),
                                         m(B, dtype=torch.long), m(B, dtype=torch.bool), "trusted"),
    "tier_targets": lambda: tier_targets(m(B, dtype=torch.long), m(B), 0.1, m(B, dtype=torch.long), 0.8, C),
    "tier_targets_high": lambda: tier_targets(m(B, dtype=torch.long), m(B), 0.9, m(B, dtype=torch.long), 0.8, C),
    "weighted_soft_ce": lambda: weighted_soft_ce(m(B, C), m(B, C), m(B)),
    "weighted_average": lambda: weighted_average([{"w": m(3), "n": m((), dtype=torch.long)}] * 2, [1, 2]),
    "ema_revise": lambda: revise({"w": m(3)}, {"w": m(3)}, 0.5),
    "phi_alignment": lambda: alignment_gap(phi_correlation(m(B, C)), m(C, C, dtype=torch.float64), m(C, C)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_losses_and_parameter_ops_stay_on_the_input_device(name):
    assert {t.device for t in _flat(CASES[name]())} == {META}
