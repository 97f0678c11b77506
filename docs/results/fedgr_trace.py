"""Trace one FedGR run round by round against the ground truth (reads truth, so it lives here).

Usage: .venv/bin/python docs/results/fedgr_trace.py CONFIG DATA_DIR OUT_DIR [dotted.key=value ...]
e.g.   .venv/bin/python docs/results/fedgr_trace.py configs/fedgr_digits_noniid_mixed.yaml \\
           runs/fedgr/fedgr_digits_noniid_mixed/data-s0 /tmp/fedgr-trace
Per sieve round: the median surrogate lbar of truly clean and truly noisy samples, the precision
and recall of q < 0.5 as "noisy", the r_k Pearson, and the share of samples whose q is within
0.01 of 0 or 1. Every 5 rounds: the share of samples kept in L_SR, the accuracy of their targets
against the truth, the global model's weak-view accuracy and mean max-softmax.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
import yaml

from fedcore.config import ExperimentConfig
from fedcore.data.federated import FederatedDataset
from fedcore.methods import fedgr as fedgr_module
from fedcore.run import run_experiment


def main(cfg_path: str, data: str, out: str, overrides: list[str]) -> None:
    raw = yaml.safe_load(open(cfg_path))
    for item in overrides:
        key, value = item.split("=", 1)
        parts = key.split(".")
        node = raw
        for k in parts[:-1]:
            node = node.setdefault(k, {})
        node[parts[-1]] = yaml.safe_load(value)
    cfg = ExperimentConfig.model_validate(raw)
    fed = FederatedDataset.load(data)
    truth, idx = fed.truth, [np.asarray(p) for p in fed.client_indices]
    cls = fedgr_module.FedGR
    after_probe, targets = cls.after_probe, cls._targets

    def traced_after_probe(self, state, plan, answers):
        out_plan = after_probe(self, state, plan, answers)
        sieve, cids = out_plan.instructions["sieve"], sorted(out_plan.instructions["sieve"])
        noisy = np.concatenate([truth.is_noisy_sample[idx[c]] for c in cids])
        q = np.concatenate([sieve[c]["q"] for c in cids])
        lbar = np.concatenate([a.uploads["lbar"] for a in sorted(answers, key=lambda a: a.cid)])
        rate = np.array([sieve[c]["rate"] for c in cids])
        flagged = q < 0.5
        pearson = np.corrcoef(rate, truth.realized_rate[cids])[0, 1]
        print(f"round {state.rnd}: median lbar clean {np.median(lbar[~noisy]):.2f} noisy {np.median(lbar[noisy]):.2f};"
              f" q<.5 precision {noisy[flagged].mean() if flagged.any() else float('nan'):.2f}"
              f" recall {flagged[noisy].mean():.2f}; r_k Pearson {pearson:.2f};"
              f" q binary {np.mean((q < 0.01) | (q > 0.99)):.2f}")
        return out_plan

    kept: dict[int, list] = {}

    def traced_targets(self, task, g_logits, est):
        tgt, keep = targets(self, task, g_logits, est)
        y = torch.as_tensor(truth.y_true[idx[task.cid]])
        conf = torch.softmax(g_logits, 1).max(1).values
        kept.setdefault(task.rnd, []).append((int(keep.sum()), len(keep), int((tgt.argmax(1)[keep] == y[keep]).sum()),
                                              float((g_logits.argmax(1) == y).float().mean()), float(conf.mean())))
        return tgt, keep

    cls.after_probe, cls._targets = traced_after_probe, traced_targets
    try:
        res = run_experiment(cfg, out, data=fed)
    finally:  # leave FedGR as it was for whoever imports this module (the tests do)
        cls.after_probe, cls._targets = after_probe, targets
    for rnd, rows in sorted(kept.items()):
        if rnd % 5 == 0:
            k, n, ok = (sum(r[i] for r in rows) for i in range(3))
            print(f"round {rnd}: kept {k / n:.2f}, kept targets correct {ok / max(k, 1):.2f}, global weak-view acc "
                  f"{np.mean([r[3] for r in rows]):.2f}, mean max-softmax {np.mean([r[4] for r in rows]):.2f}, "
                  f"test acc {res.history[rnd]['test/acc']:.3f}")
    print("last-10 test accuracy", res.summary["final/acc_last10"])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
