"""What FedGR's federated sieve separates: classes or noise. Reads ground truth, so it lives here.

Usage:
  .venv/bin/python docs/results/fedgr_sieve_split.py split RUN DATA [RUN DATA ...]
      For each finished FedGR run (a `fedcore run` out dir) and the data artifact it trained
      on: last-10 accuracy, the global model's test accuracy at the hand-over (round alpha),
      and what the last sieve flags (q < 0.5): the share flagged per *given* class, and the
      normalized mutual information of the flags with the given labels and with the true
      noise flags. Reads the final sieve from the run's checkpoint.
  .venv/bin/python docs/results/fedgr_sieve_split.py class-norm CONFIG DATA OUT [--set k=v ...]
      Runs FedGR with one change: the server z-scores the pooled surrogates within each given
      class before the GMM. This needs each sample's label at the server, which breaks the
      paper's privacy argument (one float per sample), so it is a diagnostic here and not a
      method param: it asks how much of the failure is the class split alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import fedcore.methods.fedgr as fedgr_mod
from fedcore.data.federated import FederatedDataset
from fedcore.metrics import flag_dependence
from fedcore.registries import load_config
from fedcore.run import run_experiment
from fedcore.stats.gmm import zscore


def split_report(run: str, data: str) -> None:
    fed = FederatedDataset.load(data)
    ck = torch.load(Path(run) / "checkpoints" / "latest.pt", weights_only=False, map_location="cpu")
    sieve = ck["state"]["extra"].get("sieve")
    if not sieve:
        raise SystemExit(f"{run}: no sieve in the checkpoint (not a FedGR run, or it ended in warm-up)")
    y = fed.y_train.numpy()
    idx = np.concatenate([np.asarray(fed.client_indices[c]) for c in sorted(sieve)])
    flags = np.concatenate([np.asarray(sieve[c]["q"]) < 0.5 for c in sorted(sieve)])
    given, noisy = y[idx], fed.truth.is_noisy_sample[idx]
    hist = pd.read_csv(Path(run) / "history.csv")
    alpha = int(hist.loc[hist["fedgr/loss_sr"].notna(), "round"].min()) - 1
    per_class = " ".join(f"{flags[given == k].mean():.2f}" if (given == k).any() else "-"
                         for k in range(fed.num_classes))
    last10 = hist["test/acc"].tail(10).mean()
    handover = hist.loc[hist["round"] == alpha, "test/acc"].iloc[0]
    print(f"| {run} | {100 * last10:.1f} | {100 * handover:.1f} | {flag_dependence(flags, given):.2f} "
          f"| {flag_dependence(flags, noisy):.2f} | {per_class} |")


def _z_within(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
    z = values.astype(float).copy()
    for k in np.unique(labels):
        z[labels == k] = zscore(values[labels == k][:, None])[:, 0]
    return z


def class_norm(cfg_path: str, data: str, out: str, overrides: list[str]) -> None:
    probe, after = fedgr_mod.FedGR.client_probe, fedgr_mod.FedGR.after_probe

    def probe_with_labels(self, task):
        update = probe(self, task)
        update.uploads["y"] = task.data.labels.cpu().numpy()
        return update

    def after_class_norm(self, state, plan, answers):
        sizes = [len(a.uploads["lbar"]) for a in answers]
        z = _z_within(np.concatenate([a.uploads["lbar"] for a in answers]),
                      np.concatenate([a.uploads["y"] for a in answers]))
        for a, part in zip(answers, np.split(z, np.cumsum(sizes)[:-1]), strict=True):
            a.uploads["lbar"] = part
        return after(self, state, plan, answers)

    cfg = load_config(cfg_path, overrides)
    if cfg.method.name != "fedgr":
        raise SystemExit(f"{cfg_path}: method is '{cfg.method.name}', expected fedgr")
    fedgr_mod.FedGR.client_probe = probe_with_labels
    fedgr_mod.FedGR.after_probe = after_class_norm
    try:
        res = run_experiment(cfg, out, data=data)
    finally:  # leave FedGR as it was for anything else in this process
        fedgr_mod.FedGR.client_probe, fedgr_mod.FedGR.after_probe = probe, after
    s = res.summary
    print(f"class-norm sieve: acc last-10 {100 * s['final/acc_last10']:.1f}, "
          f"r_k Pearson {s.get('last/noise/rate_pearson', float('nan')):.2f}, "
          f"sample F1 {s.get('last/detect/sample_f1', float('nan')):.2f}")


def main(argv: list[str]) -> None:
    if argv[:1] == ["split"] and len(argv) >= 3 and len(argv) % 2 == 1:
        print("| run | acc last-10 | acc at hand-over | NMI(flags, given label) | NMI(flags, noise) "
              "| flagged share per given class 0..K-1 |")
        print("|---|---|---|---|---|---|")
        for run, data in zip(argv[1::2], argv[2::2], strict=True):
            split_report(run, data)
    elif argv[:1] == ["class-norm"] and len(argv) >= 4:
        sets = [v for k, v in zip(argv[4:], argv[5:], strict=False) if k == "--set"]
        class_norm(argv[1], argv[2], argv[3], sets)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
