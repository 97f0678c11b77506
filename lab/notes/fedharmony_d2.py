"""FedHarmony diagnostic D2 (spec fedharmony.md, v3 notes): how ECL pulls on a trained model.

Usage: .venv/bin/python lab/notes/fedharmony_d2.py DATA_DIR RUN_DIR [RUN_DIR...]
For each run's global model (model.pt), every client of DATA_DIR scores its own images. ECL's
gradient against BCE's is then measured on each client's whole local set, in logit space, at
lam = 1 (`stats.correlation.ecl_diagnostics`). Two teachers are used: the leave-one-out
consensus (the phi of the other clients' pooled moments, under the same model) and the oracle,
the true correlation. Two readings of Psi are used: v2 (per-entry mean, Gamma = 1, no diagonal)
and v3 (sum, Gamma = |R*|, diagonal). Blocks are the spectral blocks of the teacher. The script
prints the mean gradient ratio, the share of ECL's gradient that opposes the labels, and the
in-block norms of the consensus, the client's own correlation and the truth. On FedAvg-IID's
model a stationary objective would give a small ratio. It reads ground truth (the oracle), so
it lives here and not in the library.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from fedcore.data.federated import FederatedDataset
from fedcore.models import build_model
from fedcore.registries import load_config
from fedcore.run import make_context
from fedcore.stats.correlation import (
    annotated,
    block_mask,
    block_norm,
    consensus,
    default_num_blocks,
    ecl_diagnostics,
    entry_weights,
    phi_correlation,
    score_moments,
    spectral_blocks,
)

READINGS = {"v2": ("one", False, True), "v3": ("abs", True, False)}  # Gamma, diagonal, per-entry mean


def diagnose(run: Path, fed: FederatedDataset) -> dict[str, float]:
    cfg = load_config(run / "config.yaml")
    ctx = make_context(cfg, fed, torch.device("cpu"))
    model = build_model(cfg.model, ctx.store.in_shape, fed.num_classes, seed=cfg.seed)
    model.load_state_dict(torch.load(run / "model.pt", map_location="cpu"))
    model.eval()
    with torch.no_grad():
        logits = [model(c.x()).double() for c in ctx.clients]
    probs = [torch.sigmoid(z) for z in logits]
    stats = {k: phi_correlation(p).numpy() for k, p in enumerate(probs)}
    moments = {k: score_moments(p.numpy()) for k, p in enumerate(probs)}
    sizes = {k: len(p) for k, p in enumerate(probs)}
    teachers = consensus(stats, sizes, list(stats), "pooled", moments=moments)
    truth = np.asarray(fed.meta["extras"]["true_corr"], dtype=np.float64)
    g, c = default_num_blocks(fed.num_classes), fed.num_classes
    out: dict[str, list[float]] = {}
    for k, client in enumerate(ctx.clients):
        y, keep = client.labels.double(), annotated(client.labels)
        for tname, teacher in (("consensus", teachers[k]), ("oracle", truth)):
            blocks = spectral_blocks(teacher, g, seed=0)
            plain = block_mask(blocks, c)
            if tname == "consensus":
                out.setdefault("norm consensus", []).append(block_norm(teacher, plain))
                out.setdefault("norm own", []).append(block_norm(stats[k], plain))
                out.setdefault("norm truth", []).append(block_norm(truth, plain))
            for rname, (gamma, diag, per_entry) in READINGS.items():
                w = entry_weights(teacher, block_mask(blocks, c, diagonal=diag), gamma)
                d = ecl_diagnostics(logits[k], y, torch.as_tensor(teacher), torch.as_tensor(w), 1.0, keep=keep,
                                    per_entry=per_entry)
                for key, v in d.items():
                    out.setdefault(f"{tname} {rname} {key}", []).append(v)
    return {k: float(np.mean(v)) for k, v in out.items()}


def main(data: Path, runs: list[Path]) -> None:
    fed = FederatedDataset.load(data)
    for run in runs:
        res = diagnose(run, fed)
        print(f"{run}: " + "; ".join(f"{k} {v:.3g}" for k, v in res.items()))


if __name__ == "__main__":
    main(Path(sys.argv[1]), [Path(a) for a in sys.argv[2:]])
