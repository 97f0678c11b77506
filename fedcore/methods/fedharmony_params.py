"""FedHarmony's params (method: `fedharmony.py`; spec fedharmony.md, v2 and v3 notes).

The defaults are the v2 reading. Each v3 reading is a param, so both stay reachable:

    v2 (default)                                 v3 reading
    timing: upload (the trained model's R_k;     timing: start (the global model scores the data
      the teacher arrives a round late)            at the round start; the teacher of this round)
    teacher: mean                                teacher: pooled (phi of pooled moments) | caa
                                                   (the previous CAA weights) | median
    weighting: one, diagonal: false,             weighting: abs (Gamma = |R*|), diagonal: true,
      scale: entry                                 scale: sum
    lam_schedule: constant                       lam_schedule: caa (lam * (1 - alpha(t)))
    gamma_by: value (q_k = exp(-gamma s_k))      gamma_by: median (gamma / median(s_k))
    mask_unannotated: false                      mask_unannotated: true (no BCE on labels a client
                                                   never annotates)
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedcore.config import tune_range
from fedcore.methods.registry import MethodParams


class FedHarmonyParams(MethodParams):
    lam: float = Field(1.0, ge=0.0, description="weight of the consensus alignment loss",
                       json_schema_extra=tune_range(0.01, 2.0, log=True))
    gamma: float = Field(1.0, ge=0.0, description="CAA quality temperature: q_k = exp(-gamma s_k) "
                         "(gamma_by: median: the c of gamma = c / median(s_k))",
                         json_schema_extra=tune_range(0.1, 10.0, log=True))
    num_blocks: int | None = Field(None, ge=1, description="G label blocks; default ceil(C / 4)")
    t0_fraction: float = Field(0.5, gt=0.0, description="T0 = t0_fraction * train.rounds in alpha(t)")
    teacher: Literal["mean", "median", "pooled", "caa"] = Field(
        "mean", description="leave-one-out consensus operator: size-weighted mean of R_j, elementwise median, "
        "phi of the pooled moments (uploads each client's marginals and pair moments), or the mean weighted "
        "by the previous round's CAA weights")
    consensus: bool = Field(True, description="ECL: align local correlation with the consensus teacher")
    caa: bool = Field(True, description="correlation-aware aggregation (off: sample-count weights)")
    blocks: bool = Field(True, description="align within spectral blocks (off: the full matrix)")
    eps: float = Field(1e-6, gt=0.0, description="phi correlation denominator guard")
    estimate: Literal["whole", "batch"] = Field(
        "whole", description="R_k in the loss: whole local set refreshed per step, or the mini-batch alone (spec v1)")
    scale: Literal["entry", "sum"] = Field(
        "entry", description="alignment Psi: mean squared gap per aligned entry, or the sum (spec v1, v3)")
    # -- spec v3 readings (defaults: v2) --
    timing: Literal["upload", "start"] = Field(
        "upload", description="upload: R_k of the trained local model, teacher used next round (v2); start: the "
        "global model scores each sampled client at the round start and the teacher is used this round (v3)")
    gap_from: Literal["trained", "start"] = Field(
        "trained", description="R_k behind CAA's s_k: the trained local model's, or the round-start one "
        "(timing: start only)")
    weighting: Literal["one", "abs"] = Field("one", description="Psi's entry weights Gamma: 1 or |R*| (v3)")
    diagonal: bool = Field(False, description="keep the diagonal in Psi and s_k (v3: on)")
    lam_schedule: Literal["constant", "caa"] = Field(
        "constant", description="lam each round, or lam * (1 - alpha(t)) with CAA's alpha(t)")
    gamma_by: Literal["value", "median"] = Field(
        "value", description="CAA temperature: gamma as given, or gamma / median(s_k) of the round (v3)")
    mask_unannotated: bool = Field(
        False, description="leave labels a client never annotates out of its BCE (v3; off: trained as negatives)")
    diagnostics: bool = Field(
        True, description="log ECL's gradient ratio to BCE and its share opposing the labels each round (one "
        "extra backward over the local scores)")
