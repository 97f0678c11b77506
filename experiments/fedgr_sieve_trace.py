"""Per-round diagnosis of FedGR's sieve on any run's global models (reads truth: lives here).

Usage: .venv/bin/python experiments/fedgr_sieve_trace.py CONFIG DATA_DIR OUT_DIR [dotted.key=value ...]

Runs CONFIG (any method; FedAvg shows what the warm-up hands over) and, after every round,
scores every client's training samples with the global model w^t on the un-augmented image,
as FedGR's clients do at the start of round t. For the raw loss of that round and for the
running mean over every round since round 0 (the authors' `loss_mean`), it prints the median
surrogate of truly clean and truly noisy samples, the AUC of the surrogate for "noisy" (pooled
and within each given class), the pooled two-component GMM's means and clean weight (spec v2
settings), sample F1 of q < 0.5, r_k = share of q < 0.5 against the realized rates (Pearson,
MAE), the Pearson of each client's mean surrogate with its rate, and the NMI of the flags with
the given label. The rows also go to OUT_DIR/sieve_trace.csv.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import yaml

from fedcore import run as run_module
from fedcore.config import ExperimentConfig
from fedcore.data.federated import FederatedDataset
from fedcore.methods.fedgr import _GMM_SALT
from fedcore.metrics.noise import binary_prf, flag_dependence, rate_pearson_mae
from fedcore.models import build_model
from fedcore.stats.gmm import clean_posterior
from fedcore.stats.sieving import GMM_KW


def auc(score: np.ndarray, pos: np.ndarray) -> float:
    """P(score of a positive > score of a negative), ties counted half (Mann-Whitney)."""
    from scipy.stats import rankdata

    if pos.all() or not pos.any():
        return float("nan")
    r = rankdata(score)
    n1, n0 = pos.sum(), (~pos).sum()
    return float((r[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def sieve_stats(s: np.ndarray, noisy: np.ndarray, given: np.ndarray, cid: np.ndarray, rates: np.ndarray,
                seed: int = 0) -> dict:
    q, means = clean_posterior(s, seed=seed, **GMM_KW)
    flag = q < 0.5
    k = len(rates)
    r_est = np.array([flag[cid == c].mean() for c in range(k)])
    m_client = np.array([s[cid == c].mean() for c in range(k)])
    within = [auc(s[given == y], noisy[given == y]) for y in np.unique(given)]
    rp = rate_pearson_mae(r_est, rates)
    return {
        "med_clean": float(np.median(s[~noisy])), "med_noisy": float(np.median(s[noisy])),
        "auc": auc(s, noisy), "auc_within_class": float(np.nanmean(within)),
        "mu_clean": float(means[0, 0]), "mu_noisy": float(means[1, 0]), "w_clean": float(np.mean(q >= 0.5)),
        "f1": binary_prf(flag, noisy)["f1"], "r_pearson": rp["pearson"], "r_mae": rp["mae"],
        "mean_s_pearson": float(np.corrcoef(m_client, rates)[0, 1]), "label_nmi": flag_dependence(flag, given),
    }


class TracingEvaluator(run_module.Evaluator):
    """The run's evaluator plus the sieve statistics of the model it is handed (w^{t+1})."""

    rows: list[dict] = []

    def __init__(self, fed: FederatedDataset, device, train_store, seed: int = 0, **kw) -> None:
        super().__init__(fed, device, train_store, seed=seed, **kw)
        self.seed = seed
        parts = [np.asarray(p) for p in fed.client_indices]
        self.idx = torch.as_tensor(np.concatenate(parts))
        self.cid = np.concatenate([np.full(len(p), c) for c, p in enumerate(parts)])
        self.given = fed.y_train.numpy()[self.idx.numpy()]
        self.noisy = fed.truth.is_noisy_sample[self.idx.numpy()]
        self.rates = np.asarray(fed.truth.realized_rate, float)
        self.sum, self.count = np.zeros(len(self.idx)), 0

    def observe(self, model: torch.nn.Module, rnd: int) -> None:
        logits = self.logits(model, self.train_store, self.idx.to(self.y_test.device)).cpu()
        loss = F.cross_entropy(logits, torch.as_tensor(self.given), reduction="none").numpy()
        self.sum += loss
        self.count += 1
        # FedGR's GMM seed of the round whose clients score with this model, so that the
        # running-mean rows reproduce its sieve when every client trains every round.
        seed = int(np.random.default_rng([self.seed, rnd, _GMM_SALT]).integers(2**31 - 1))
        for kind, s in (("raw", loss), ("mean", self.sum / self.count)):
            row = {"round": rnd, "kind": kind, **sieve_stats(s, self.noisy, self.given, self.cid, self.rates, seed)}
            self.rows.append(row)
            print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)

    def __call__(self, model: torch.nn.Module, rnd: int) -> dict[str, float]:
        out = super().__call__(model, rnd)
        self.observe(model, rnd)  # the model every client scores at the start of round rnd
        print(f"round {rnd}: test/acc={out['test/acc']:.3f} memorization={out.get('train/memorization', 0):.3f}")
        return out


def main(cfg_path: str, data: str, out: str, overrides: list[str]) -> None:
    raw = yaml.safe_load(open(cfg_path))
    for item in overrides:
        key, value = item.split("=", 1)
        node = raw
        for k in key.split(".")[:-1]:
            node = node.setdefault(k, {})
        node[key.split(".")[-1]] = yaml.safe_load(value)
    cfg = ExperimentConfig.model_validate(raw)
    fed = FederatedDataset.load(data)
    original = run_module.Evaluator
    holder: list[TracingEvaluator] = []

    def make(*a, **kw):
        ev = TracingEvaluator(*a, **{"seed": cfg.seed, **kw})
        init = build_model(cfg.model, ev.train_store.in_shape, fed.num_classes, seed=cfg.seed).to(ev.y_test.device)
        ev.observe(init, 0)  # round 0's surrogate comes from the initial model
        holder.append(ev)
        return ev

    run_module.Evaluator = make
    try:
        res = run_module.run_experiment(cfg, out, data=fed)
    finally:
        run_module.Evaluator = original
    rows = holder[0].rows
    with open(Path(out) / "sieve_trace.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print("last-10 test accuracy", res.summary["final/acc_last10"], "best", res.summary.get("final/acc_best"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
