"""Why FedGR stalls on the digits presets: probe a finished run's global model (model.pt).

Usage: .venv/bin/python lab/notes/fedgr_diagnose.py RUN_DIR DATA_DIR
Prints, on the client training data: the model's max-softmax confidence (quantiles and the
share above each threshold, with the accuracy of those pseudo-labels against the truth),
its prediction histogram, and what the pooled GMM sieve would make of its losses on plain
and on weak views (r_k Pearson / MAE against the true rates, precision of the kept set).
Reads ground truth, so it lives here and not in the library.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from fedcore.data.federated import FederatedDataset
from fedcore.metrics.noise import rate_pearson_mae
from fedcore.models import build_model
from fedcore.registries import load_config
from fedcore.run import make_context
from fedcore.stats.sieving import local_sieve, pooled_sieve
from fedcore.train.augment import Augmenter


def main(run: Path, data: Path) -> None:
    cfg = load_config(run / "config.yaml")
    fed = FederatedDataset.load(data)
    ctx = make_context(cfg, fed, torch.device("cpu"))
    model = build_model(cfg.model, ctx.store.in_shape, fed.num_classes, seed=cfg.seed)
    model.load_state_dict(torch.load(run / "model.pt", map_location="cpu"))
    model.eval()
    idx = np.concatenate([np.asarray(p) for p in fed.client_indices])
    y_true, noisy = fed.truth.y_true[idx], fed.truth.is_noisy_sample[idx]
    aug, gen = Augmenter.for_dataset(fed.meta, ctx.store.in_shape), torch.Generator().manual_seed(0)
    for view in ("plain", "weak"):
        with torch.no_grad():
            logits = [model(c.x() if view == "plain" else c.store.normalize(aug.weak(c.x01(), gen)))
                      for c in ctx.clients]
        prob = torch.softmax(torch.cat(logits), 1)
        conf, pred = (t.numpy() for t in prob.max(1))
        print(f"[{view}] accuracy vs truth {np.mean(pred == y_true):.3f}; confidence quantiles 10/50/90/max "
              f"{np.round(np.quantile(conf, [0.1, 0.5, 0.9, 1.0]), 3).tolist()}")
        for tau in (0.25, 0.5, 0.95):
            keep = conf >= tau
            acc = f"{np.mean(pred[keep] == y_true[keep]):.3f}" if keep.any() else "-"
            print(f"  conf >= {tau}: {keep.mean():.3f} of samples, pseudo-label accuracy {acc}")
        print(f"  prediction histogram {np.bincount(pred, minlength=fed.num_classes).tolist()}")
        lbar = {c.cid: F.cross_entropy(lg, c.labels, reduction="none").numpy()
                for c, lg in zip(ctx.clients, logits, strict=True)}
        for name, fit in (("pooled", pooled_sieve), ("per-client", local_sieve)):
            res = fit(lbar, seed=0)
            est = np.array([res.rate[c] for c in range(fed.num_clients)])
            stats = rate_pearson_mae(est, fed.truth.realized_rate)
            kept = np.concatenate([res.q[c] >= 0.5 for c in range(fed.num_clients)])
            top2 = np.argsort(np.bincount(pred, minlength=fed.num_classes))[-2:]
            share = np.isin(fed.y_train.numpy()[idx][kept], top2).mean()
            print(f"  {name} sieve: r_k Pearson {stats['pearson']:.3f}, MAE {stats['mae']:.3f}; kept {kept.sum()}"
                  f" samples, {np.mean(~noisy[kept]):.3f} clean, {share:.3f} labelled as the 2 most-predicted classes")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
