"""Why FedRG's geometry detector over-flags: record what each client's split sees, score it offline.

Usage: .venv/bin/python lab/notes/fedrg_diagnose.py CONFIG DATA_DIR OUT_DIR [--set k=v ...]
Runs FedRG as `fedcore run` would, recording every call of the per-client noise split
(geometry: 1 - P_clean; small-loss: CE of the received model) with the client's sample
indices. After the run it prints, per train round (every 5th and the last): the ranking
quality of each score against the true noise flags (ROC AUC), the share the GMM split
flags, its F1, and the best F1 any threshold on that score could reach. Reads ground truth
after the run, so it lives here and not in the library.
"""

from __future__ import annotations

import sys
from collections import defaultdict

import numpy as np
from sklearn.metrics import f1_score, precision_recall_curve, roc_auc_score

import fedcore.methods.fedrg as fedrg_mod
from fedcore.data.federated import FederatedDataset
from fedcore.registries import load_config
from fedcore.run import run_experiment
from fedcore.stats import vmf
from fedcore.stats.gmm import clean_posterior

CALLS: list[tuple] = []  # (round, kind, idx, score, flagged, seed)


def _recording_detect(orig):
    def detect(method, task):
        split = vmf.split_noisy
        kinds = iter(("geometry", "small_loss"))
        idx = task.data.indices.cpu().numpy()

        def record(score, seed):
            flagged = split(score, seed)
            CALLS.append((task.rnd, next(kinds), idx, np.asarray(score, float), flagged, seed))
            return flagged

        vmf.split_noisy = record
        try:
            return orig(method, task)
        finally:
            vmf.split_noisy = split
    return detect


def monotone_flags(score: np.ndarray, seed: int) -> np.ndarray:
    """The same GMM with its tails fixed: below the clean mean always clean, above the noisy mean
    always noisy, the posterior decides in between (a wide component otherwise wins both tails)."""
    q, means = clean_posterior(score, seed=seed)
    lo, hi = float(means[0][0]), float(means[1][0])
    return np.where(score <= lo, False, np.where(score >= hi, True, q < 0.5))


def best_f1(noisy: np.ndarray, score: np.ndarray) -> float:
    p, r, _ = precision_recall_curve(noisy, score)
    return float(np.max(2 * p * r / np.maximum(p + r, 1e-12)))


def main(cfg_path: str, data: str, out: str, overrides: list[str]) -> None:
    cfg = load_config(cfg_path, overrides)
    detect = fedrg_mod.FedRG.detect
    fedrg_mod.FedRG.detect = _recording_detect(detect)
    try:
        run_experiment(cfg, out, data=data)
    finally:  # leave FedRG as it was for whoever imports this module (the tests do)
        fedrg_mod.FedRG.detect = detect
    gt = FederatedDataset.load(data).truth
    truth, y_true = gt.is_noisy_sample, np.asarray(gt.y_true)
    by_round: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for rnd, kind, idx, score, flagged, seed in CALLS:
        by_round[rnd][kind].append((truth[idx], score, flagged, monotone_flags(score, seed), y_true[idx]))
    rounds = sorted(by_round)
    print_table(by_round, rounds)
    print_rare(by_round, rounds)


def print_table(by_round, rounds) -> None:
    print("| round | detector | AUC (mean over clients) | flagged | F1 of the GMM split | F1, monotone split "
          "| best-threshold F1 |")
    print("|---|---|---|---|---|---|---|")
    for rnd in [r for i, r in enumerate(rounds) if i % 5 == 0 or r == rounds[-1]]:
        for kind in ("geometry", "small_loss"):
            rows = by_round[rnd][kind]
            auc = [roc_auc_score(t, s) for t, s, _, _, _ in rows if 0 < t.mean() < 1]
            f1 = [f1_score(t, f, zero_division=0) for t, _, f, _, _ in rows]
            mono = [f1_score(t, m, zero_division=0) for t, _, _, m, _ in rows]
            best = [best_f1(t, s) for t, s, _, _, _ in rows if t.any()]
            flagged = np.mean([f.mean() for _, _, f, _, _ in rows])
            print(f"| {rnd} | {kind} | {np.mean(auc):.3f} | {flagged:.2f} | {np.mean(f1):.3f} | {np.mean(mono):.3f} "
                  f"| {np.mean(best):.3f} |")


def print_rare(by_round, rounds, rare_share: float = 0.1) -> None:
    """The paper's premise: under label skew, small loss flags clean samples of client-rare classes.

    Per detector, the share of *clean* samples flagged noisy, for samples whose true class is
    rare on their client (< `rare_share` of its samples) and for the others, pooled over clients.
    """
    print(f"\n| round | detector | clean samples flagged: rare class (< {rare_share:.0%} of the client) "
          "| common class | rare clean samples |")
    print("|---|---|---|---|---|")
    for rnd in (rounds[0], rounds[-1]):
        for kind in ("geometry", "small_loss"):
            fp = {True: [0, 0], False: [0, 0]}
            for t, _, f, _, y in by_round[rnd][kind]:
                share = np.bincount(y, minlength=y.max() + 1)[y] / len(y)
                for rare in (True, False):
                    m = ~t & ((share < rare_share) == rare)
                    fp[rare][0] += int((f & m).sum())
                    fp[rare][1] += int(m.sum())
            rate = {k: v[0] / max(v[1], 1) for k, v in fp.items()}
            print(f"| {rnd} | {kind} | {rate[True]:.3f} | {rate[False]:.3f} | {fp[True][1]} |")


if __name__ == "__main__":
    args = sys.argv[1:]
    sets = [a for i, a in enumerate(args) if i > 0 and args[i - 1] == "--set"]
    pos = [a for i, a in enumerate(args) if a != "--set" and (i == 0 or args[i - 1] != "--set")]
    main(pos[0], pos[1], pos[2], sets)
