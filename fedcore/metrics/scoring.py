"""Runtime scoring: the only place where ground truth meets a running experiment.

`Scorer` turns a method's `Estimates` into metrics against the noise scene's truth;
`Evaluator` scores the global model on the test split (and memorization of noisy
training labels); `LocalMemorization` scores each trained client's own model on that
client's noisy samples. The engine calls them through plain callables and never sees truth.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fedcore.data.federated import FederatedDataset
from fedcore.engine.store import TensorStore
from fedcore.engine.types import ClientUpdate, Estimates, Params
from fedcore.metrics.classification import accuracy, confusion, macro_prf
from fedcore.metrics.multilabel import multilabel_eval, true_correlation
from fedcore.metrics.noise import (
    binary_prf,
    flag_dependence,
    memorization_rate,
    noise_majority,
    rate_pearson_mae,
    relabel_metrics,
    split_prf,
)
from fedcore.metrics.probe import LossProbe


class Scorer:
    def __init__(self, fed: FederatedDataset) -> None:
        self.truth = fed.truth
        self.parts = [np.asarray(p) for p in fed.client_indices]
        self.y_orig = fed.y_train.numpy()
        self.multi = fed.task == "multi"
        # Real noise knows the truth only where a trusted label exists: scores use those samples alone,
        # and with none at all the scores are absent rather than a misleading 0.
        known = self.truth.y_true_known
        self.known = np.ones(len(self.y_orig), bool) if known is None else np.asarray(known, bool)
        # Per client: which samples sit in a (client, given label) group where noise outnumbers
        # the clean labels; detection F1 is also reported within those samples and within the rest.
        self.majority = None if self.multi else [
            noise_majority(self.y_orig[p], self.truth.is_noisy_sample[p]) for p in self.parts]

    def __call__(self, est: Estimates, rnd: int) -> dict[str, float]:
        out: dict[str, float] = {}
        if est.client_rate:
            out.update(self.rates(est.client_rate))
        # Clients whose truth is known: all under synthetic noise, those with trusted samples under real noise.
        cids = [c for c in sorted(est.client_noisy) if np.isfinite(self.truth.realized_rate[c])]
        if cids:
            prf = binary_prf([est.client_noisy[c] for c in cids], self.truth.is_noisy_client[cids])
            out.update({f"detect/client_{k}": v for k, v in prf.items()})
        for name, masks in est.sample_noisy.items():
            prefix = "detect/sample" if name == "main" else f"detect/{name}/sample"
            out.update({f"{prefix}_{k}": v for k, v in self.samples(masks).items()})
        if est.labels and not self.multi and self.known.any():
            out.update({f"relabel/{k}": v for k, v in self.relabels(est.labels).items()})
        return out

    def rates(self, client_rate: dict[int, float]) -> dict[str, float]:
        cids = sorted(client_rate)
        est = np.array([client_rate[c] for c in cids], dtype=float)
        out = {f"noise/rate_est/client_{c:02d}": float(client_rate[c]) for c in cids}
        true = np.asarray(self.truth.realized_rate, dtype=float)[cids]
        scored = np.isfinite(true)  # NaN: a client without a single trusted label
        if scored.any():
            stats = rate_pearson_mae(est[scored], true[scored])
            out.update({"noise/rate_pearson": stats["pearson"], "noise/rate_mae": stats["mae"]})
        return out

    def samples(self, masks: dict[int, np.ndarray]) -> dict[str, float]:
        """Detection P/R/F1 averaged over clients, the pooled F1, and (single-label) how much
        the pooled flags depend on the given label vs on the true noise (NMI): a detector
        whose label NMI exceeds its noise NMI is sorting classes, not noise. Single-label runs
        also get pooled P/R/F1 within noise-majority (client, label) groups (*_majority) and
        within the other groups (*_minority)."""
        keep = {c: self.known[self.parts[c]] for c in masks}
        scored = [c for c in masks if keep[c].any()]
        if not scored:
            return {}
        per = [binary_prf(np.asarray(masks[c], bool)[keep[c]], self.truth.is_noisy_sample[self.parts[c]][keep[c]])
               for c in scored]
        out = {k: float(np.mean([p[k] for p in per])) for k in ("precision", "recall", "f1")}
        pooled_pred = np.concatenate([np.asarray(masks[c], bool)[keep[c]] for c in masks])
        pooled_true = np.concatenate([self.truth.is_noisy_sample[self.parts[c]][keep[c]] for c in masks])
        out["f1_pooled"] = binary_prf(pooled_pred, pooled_true)["f1"]
        if not self.multi:
            given = np.concatenate([self.y_orig[self.parts[c]][keep[c]] for c in masks])
            out["label_nmi"] = flag_dependence(pooled_pred, given)
            out["noise_nmi"] = flag_dependence(pooled_pred, pooled_true)
            out.update(split_prf(pooled_pred, pooled_true, np.concatenate([self.majority[c][keep[c]] for c in masks])))
        return out

    def relabels(self, labels: dict[int, np.ndarray]) -> dict[str, float]:
        idx = np.concatenate([self.parts[c] for c in labels])
        after = np.concatenate([np.asarray(labels[c]) for c in labels])
        k = self.known[idx]
        return relabel_metrics(self.y_orig[idx][k], after[k], self.truth.y_true[idx][k])


class Evaluator:
    """Scores a model on the test split; optionally memorization of noisy training labels."""

    def __init__(self, fed: FederatedDataset, device: torch.device, train_store: TensorStore,
                 memorization: bool = True, batch_size: int = 1024, loss_probe: bool = False,
                 seed: int = 0) -> None:
        self.task, self.num_classes = fed.task, fed.num_classes
        self.test = TensorStore(fed.x_test, fed.meta["mean"], fed.meta["std"], device)
        self.y_test = fed.y_test.to(device)
        self.train_store, self.batch_size = train_store, batch_size
        noisy = np.flatnonzero(fed.truth.is_noisy_sample) if memorization and self.task == "single" else []
        self.noisy_idx = torch.as_tensor(np.asarray(noisy, dtype=np.int64), device=device)
        self.noisy_labels = fed.y_train.numpy()[noisy] if len(noisy) else None
        self.true_corr = None
        if self.task == "multi":
            self.true_corr = true_correlation(fed.meta.get("extras"), fed.y_test.numpy())
        self.last: dict[str, Any] = {}
        # A small-loss detector on the evaluated model, scored like a method's own (single-label).
        self.probe = LossProbe(fed, device, seed) if loss_probe and self.task == "single" else None
        self.scorer = Scorer(fed) if self.probe else None
        self.val = HeldOut(fed, device, self) if fed.val is not None else None

    @torch.no_grad()
    def logits(self, model: torch.nn.Module, store: TensorStore, idx: torch.Tensor) -> torch.Tensor:
        model.eval()
        return torch.cat([model(store.get(idx[s:s + self.batch_size])) for s in range(0, len(idx), self.batch_size)])

    def test_scores(self, model: torch.nn.Module) -> dict[str, float]:
        """Accuracy and macro-F1 of a second model (a method's teacher) on the test split, with
        none of `__call__`'s side effects (no probe, no `last`)."""
        if self.task == "multi":
            return {}
        logits = self.logits(model, self.test, torch.arange(len(self.y_test), device=self.y_test.device))
        pred, y = logits.argmax(1).cpu().numpy(), self.y_test.cpu().numpy()
        return {"test_acc": accuracy(y, pred), "test_macro_f1": macro_prf(y, pred, self.num_classes)["f1"]}

    def __call__(self, model: torch.nn.Module, rnd: int) -> dict[str, float]:
        all_idx = torch.arange(len(self.y_test), device=self.y_test.device)
        logits = self.logits(model, self.test, all_idx)
        if self.task == "multi":
            out = multilabel_eval(logits, self.y_test, true_corr=self.true_corr)
            self.last = {"logits": logits.cpu()}
            return {**out, **(self.val(model) if self.val else {})}
        pred = logits.argmax(1).cpu().numpy()
        y = self.y_test.cpu().numpy()
        out = {"test/acc": accuracy(y, pred), "test/loss": float(F.cross_entropy(logits, self.y_test))}
        out.update({f"test/macro_{k}": v for k, v in macro_prf(y, pred, self.num_classes).items()})
        if self.noisy_labels is not None:
            mpred = self.logits(model, self.train_store, self.noisy_idx).argmax(1).cpu().numpy()
            out["train/memorization"] = memorization_rate(mpred, self.noisy_labels, np.ones(len(mpred), bool))
        if self.probe is not None:
            masks = self.probe.flags(lambda idx: self.logits(model, self.train_store, idx), rnd)
            out.update({f"detect/loss_probe/sample_{k}": v for k, v in self.scorer.samples(masks).items()})
        self.last = {"confusion": confusion(y, pred, self.num_classes)}
        if self.val is not None:
            out.update(self.val(model))
        return out


class HeldOut:
    """The global model on the validation split: every client's held-out samples against their
    noisy labels (val/acc, pooled, i.e. the sample-weighted mean of the clients' accuracies;
    val/mAP on multi-label runs) and, when present, the clean server set (val_server/*)."""

    def __init__(self, fed: FederatedDataset, device: torch.device, evaluator: Evaluator) -> None:
        val, self.ev = fed.val, evaluator
        mean, std = fed.meta["mean"], fed.meta["std"]
        self.parts = [(prefix, TensorStore(torch.from_numpy(x), mean, std, device), torch.from_numpy(y).to(device))
                      for prefix, x, y in (("val", val.x, val.y), ("val_server", val.x_server, val.y_server))
                      if len(y)]

    def __call__(self, model: torch.nn.Module) -> dict[str, float]:
        out: dict[str, float] = {}
        for prefix, store, y in self.parts:
            logits = self.ev.logits(model, store, torch.arange(len(y), device=y.device))
            if self.ev.task == "multi":
                scores = multilabel_eval(logits, y)
                out.update({f"{prefix}/{k}": scores[f"test/{k}"] for k in ("mAP", "loss")})
                continue
            out[f"{prefix}/acc"] = accuracy(y.cpu().numpy(), logits.argmax(1).cpu().numpy())
            out[f"{prefix}/loss"] = float(F.cross_entropy(logits, y))
        return out


class LocalMemorization:
    """train/local_memorization: the share of the cohort's noisy samples whose client's freshly
    trained local model predicts their noisy label (pooled over the clients of the round), and
    the same per client (`train/local_memorization/client_XX`, clients holding noisy samples only,
    so that no NaN enters the history).

    Next to train/memorization (the global model on all noisy samples) it tests FedGR's premise
    that local models memorize fast while the global model memorizes slowly. Costs one forward
    pass over the cohort's noisy samples per round.
    """

    def __init__(self, fed: FederatedDataset, device: torch.device, train_store: TensorStore,
                 batch_size: int = 1024) -> None:
        noisy = fed.truth.is_noisy_sample
        self.idx = [torch.as_tensor(np.asarray(p)[noisy[p]], dtype=torch.long, device=device)
                    for p in fed.client_indices]
        self.y = fed.y_train.to(device)
        self.store, self.batch_size = train_store, batch_size

    @torch.no_grad()
    def __call__(self, model_for: Callable[[Params], torch.nn.Module],
                 updates: Sequence[ClientUpdate]) -> dict[str, float]:
        out: dict[str, float] = {}
        hits = total = 0
        for u in updates:
            idx = self.idx[u.cid]
            if u.params is None or not len(idx):
                continue
            model = model_for(u.params).eval()
            pred = torch.cat([model(self.store.get(idx[s:s + self.batch_size])).argmax(1)
                              for s in range(0, len(idx), self.batch_size)])
            match = int((pred == self.y[idx]).sum())
            out[f"train/local_memorization/client_{u.cid:02d}"] = match / len(idx)
            hits, total = hits + match, total + len(idx)
        if total:
            out["train/local_memorization"] = hits / total
        return out
