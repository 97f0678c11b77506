"""FedHarmony diagnostic D1 (spec fedharmony.md, v3 notes): the oracle teacher.

Usage: .venv/bin/python lab/notes/fedharmony_d1.py CONFIG DATA_DIR OUT_DIR LAM [LAM...] [-s key=value ...]
Runs FedHarmony with every client's teacher R*_k replaced by the true correlation of the data
(extras['true_corr']), once per LAM, into OUT_DIR/oracle_lam<LAM>. Everything else is the config's
method section, plus the -s overrides. If the oracle helps where the consensus does not, the
consensus operator or the timing is at fault; if it fails too, the objective or the bed is. The
method sees ground truth here by design, so this lives in lab/ and registers its own
method name, never the library's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from fedcore.data.federated import FederatedDataset
from fedcore.methods.fedharmony import FedHarmony, FedHarmonyParams
from fedcore.methods.registry import register
from fedcore.registries import load_config
from fedcore.run import run_experiment


@register("fedharmony_oracle", params=FedHarmonyParams)
class OracleHarmony(FedHarmony):
    truth: np.ndarray | None = None  # set by main() from the data artifact

    def _teachers(self, extra, clients):
        return {k: np.array(self.truth) for k in clients}


def main(argv: list[str]) -> None:
    overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "-s"]
    args = [a for i, a in enumerate(argv) if a != "-s" and (i == 0 or argv[i - 1] != "-s")]
    config, data, out, lams = args[0], Path(args[1]), Path(args[2]), args[3:]
    fed = FederatedDataset.load(data)
    OracleHarmony.truth = np.asarray(fed.meta["extras"]["true_corr"], dtype=np.float64)
    for lam in lams:
        run = out / f"oracle_lam{lam}"
        if (run / "metrics.json").is_file():
            continue
        cfg = load_config(config, overrides=[*overrides, "method.name=fedharmony_oracle", f"method.params.lam={lam}"])
        res = run_experiment(cfg, run, data=fed)
        s = res.summary
        val, cf1 = 100 * s.get("final/val_mAP_best", np.nan), 100 * s["last/test/CF1"]
        print(f"oracle lam {lam}: mAP {100 * s['final/mAP']:.1f}, val mAP best {val:.1f}, CF1 {cf1:.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
