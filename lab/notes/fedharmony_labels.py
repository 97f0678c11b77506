"""Where FedHarmony's terms pull on scenes_mosaic: probe finished runs against one data artifact.

Usage: .venv/bin/python lab/notes/fedharmony_labels.py DATA_DIR RUN_DIR [RUN_DIR...]
Prints, from the data (labels only): per client, the distance between the correlation of its
own annotated labels and its leave-one-out label consensus (what BCE fits on local data vs
what the alignment asks of it there). Then per run (its global model, model.pt): test AP of
each label's group (labels some client never annotates, the others), and on the training
data, the AP of each client's never-annotated labels against the clean labels, which no
method saw. Reads ground truth, so it lives here and not in the library.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from fedcore.data.federated import FederatedDataset
from fedcore.metrics.multilabel import average_precision, label_aps
from fedcore.models import build_model
from fedcore.registries import load_config
from fedcore.run import make_context
from fedcore.stats.correlation import leave_one_out, offdiag_distance, phi_correlation


def label_tension(fed: FederatedDataset) -> list[float]:
    """Per client: ||phi(own annotated labels) - leave-one-out mean of the others'|| (off-diagonal)."""
    y = fed.y_train.numpy().astype(np.float64)
    corrs = {k: phi_correlation(y[idx], eps=0.0).numpy() for k, idx in enumerate(fed.client_indices)}
    sizes = {k: len(idx) for k, idx in enumerate(fed.client_indices)}
    teachers = leave_one_out(corrs, sizes, range(fed.num_clients))
    return [offdiag_distance(corrs[k], teachers[k]) for k in range(fed.num_clients)]


def probe(run: Path, fed: FederatedDataset) -> str:
    cfg = load_config(run / "config.yaml")
    ctx = make_context(cfg, fed, torch.device("cpu"))
    model = build_model(cfg.model, ctx.store.in_shape, fed.num_classes, seed=cfg.seed)
    model.load_state_dict(torch.load(run / "model.pt", map_location="cpu"))
    model.eval()
    unann = np.asarray(fed.meta["extras"]["true_unannotated"], dtype=bool)  # (clients, C)
    with torch.no_grad():
        test = torch.sigmoid(model(ctx.store.normalize(fed.x_test.float() / 255.0))).numpy()
        local = [torch.sigmoid(model(c.x())).numpy() for c in ctx.clients]
    aps = label_aps(fed.y_test.numpy(), test)
    some = unann.any(axis=0)
    own = [average_precision(fed.truth.y_true[idx][:, c], s[:, c])
           for k, (idx, s) in enumerate(zip(fed.client_indices, local, strict=True)) for c in np.flatnonzero(unann[k])]
    return (f"{run}: test mAP {np.nanmean(aps) * 100:.1f}; labels some client never annotates "
            f"{np.nanmean(aps[some]) * 100:.1f}, the others {np.nanmean(aps[~some]) * 100:.1f}; "
            f"never-annotated labels on their client's own images {np.nanmean(own) * 100:.1f}")


def main(data: Path, runs: list[Path]) -> None:
    fed = FederatedDataset.load(data)
    tension = label_tension(fed)
    print(f"own annotated-label correlation vs its leave-one-out consensus, per client: "
          f"{np.round(tension, 2).tolist()} (mean {np.mean(tension):.2f})")
    for run in runs:
        print(probe(run, fed))


if __name__ == "__main__":
    main(Path(sys.argv[1]), [Path(a) for a in sys.argv[2:]])
