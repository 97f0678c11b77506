"""Helpers for lab/fedrg.sh's Fashion-MNIST mode: equal round budgets and the tables.

Usage:
  fedrg_bench.py rounds CFG [-s k=v ...]        total rounds over every stage of that run
  fedrg_bench.py pad CFG TOTAL [-s k=v ...]     the override giving that run TOTAL rounds in all
  fedrg_bench.py pads CFG ROW...                `pad` for each ROW ("-s k=v -s ..."), one line each,
                                                TOTAL being the preset's rounds as a FedAvg run
  fedrg_bench.py table OUT                      the markdown tables of lab/results/notes/fedrg.md
  fedrg_bench.py auc RUN DATA                   how well each score ranks the noise at a FedRG run's end

Equal budgets: every run of a comparison gets the baselines' total number of rounds. FedRG's
SimCLR rounds count inside it: `pad` lowers (or raises) train.rounds until the run's stages add
up to TOTAL, reading only the stages a method declares, never its name. The shared baseline
runs of lab/fmnist_lib.sh keep the preset's train.rounds.

`table` reads the fmnist_lib layout: runs OUT/fedrg_<scenario>/<row>/s<seed> (rows fedavg,
symmetric_ce, fedprox, fedrg, fedrg-<variant>) and the prepared artifacts
OUT/fedrg_<scenario>/data-s<seed> (for the share of noise in noise-majority groups, which needs
the truth: this script lives here and not in the library).
"""

from __future__ import annotations

import csv
import json
import shlex
import sys
from pathlib import Path

import numpy as np

from fedcore.stats.summary import mean_std

SCENARIOS = ["sym_localized", "sym_globalized", "pair_localized", "pair_globalized"]
BASELINES = ["fedavg", "symmetric_ce", "fedprox"]
FEDRG = ["fedrg", "fedrg-posterior", "fedrg-sce_clean", "fedrg-t_est", "fedrg-combo", "fedrg-post_t",
         "fedrg-post_t_slow"]
GEOM, SMALL, PROBE = "detect/sample", "detect/small_loss/sample", "detect/loss_probe/sample"


def total_rounds(cfg_path: str, overrides: list[str]) -> tuple[int, int]:
    """(rounds over every stage, train.rounds) of the run `cfg_path` + overrides would make."""
    from fedcore.methods.registry import build_method
    from fedcore.registries import load_config

    cfg = load_config(cfg_path, overrides)
    return sum(s.rounds for s in build_method(cfg).stages), cfg.train.rounds


def pad(cfg_path: str, total: int, overrides: list[str]) -> str:
    """'-s train.rounds=N' giving the run TOTAL rounds over all its stages ('' when it has them)."""
    own, train = total_rounds(cfg_path, overrides)
    if own == total:
        return ""
    extra = f"train.rounds={train + total - own}"
    if train + total - own < 1 or total_rounds(cfg_path, [*overrides, extra])[0] != total:
        sys.exit(f"cannot give this run {total} rounds in all by train.rounds alone (it has {own})")
    return f"-s {extra}"


def pads(cfg_path: str, rows: list[str]) -> list[str]:
    """One `pad` per row of overrides (one import of fedcore for all), against the baselines' total."""
    total = total_rounds(cfg_path, ["method.name=fedavg", "method.params={}", "train.stage_rounds={}"])[0]
    return [pad(cfg_path, total, _sets(shlex.split(row))) for row in rows]


def _sets(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-s"]


# -- tables -------------------------------------------------------------------------------------
def load(run: Path) -> dict:
    summ = json.loads((run / "metrics.json").read_text())["summary"]
    hist = [r for r in csv.DictReader((run / "history.csv").open()) if r.get("stage", "train") == "train"]
    for key in (f"{GEOM}_f1", f"{SMALL}_f1", f"{PROBE}_f1"):
        vals = [float(r[key]) for r in hist if r.get(key)]
        summ[f"mean/{key}"] = float(np.mean(vals)) if vals else None
    return summ


def cell(runs: list[dict], key: str, scale: float = 100.0, digits: int = 1) -> str:
    vals = [r[key] * scale for r in runs if r.get(key) is not None]
    if not vals:
        return "-"
    if len(vals) == 1:
        return f"{vals[0]:.{digits}f} (n=1)"
    m, s = mean_std(vals)  # the library's "± over seeds": the sample std
    text = f"{m:.{digits}f} ± {s:.{digits}f}"
    return text if len(vals) == 3 else f"{text} (n={len(vals)})"


def mean(runs: list[dict], key: str) -> float | None:
    vals = [r[key] for r in runs if r.get(key) is not None]
    return float(np.mean(vals)) if vals else None


def print_table(title: str, scs: list[str], rows: list[tuple[str, object]]) -> None:
    print(f"\n{title}\n\n| | " + " | ".join(scs) + " |\n|---|" + "---|" * len(scs))
    for name, fn in rows:
        print(f"| {name} | " + " | ".join(fn(sc) for sc in scs) + " |")


def scenario_dir(out: Path, sc: str) -> Path:
    return out / f"fedrg_{sc}"


def majority_share(out: Path, sc: str) -> str:
    """Share of the noisy samples that sit in a noise-majority (client, label) group, over seeds."""
    from fedcore.data.federated import FederatedDataset
    from fedcore.errors import ArtifactError
    from fedcore.metrics import noise_majority

    shares = []
    for data in sorted(scenario_dir(out, sc).glob("data-s*")):
        try:
            fed = FederatedDataset.load(data)
        except ArtifactError as err:  # a table still prints; that cell says it lacks this seed
            print(f"fedrg_bench: skipped {data}: {err}", file=sys.stderr)
            continue
        y, noisy = fed.y_train.numpy(), fed.truth.is_noisy_sample
        maj = np.concatenate([noise_majority(y[p], noisy[p]) & noisy[p] for p in fed.client_indices])
        shares.append(maj.sum() / max(noisy.sum(), 1))
    return f"{100 * np.mean(shares):.0f}%" if shares else "-"


def table(out: Path) -> None:
    scs = [s for s in SCENARIOS if scenario_dir(out, s).is_dir()]
    runs = {(sc, v): [load(m.parent) for m in sorted((scenario_dir(out, sc) / v).glob("s*/metrics.json"))]
            for sc in scs for v in BASELINES + FEDRG}
    variants = [v for v in BASELINES + FEDRG if any(runs[sc, v] for sc in scs)]
    fedrgs = [v for v in FEDRG if v in variants]

    def rows(key, vs=variants, **kw):
        return [(v, lambda sc, v=v: cell(runs[sc, v], key, **kw)) for v in vs]

    print_table("Test accuracy, mean of the last 10 rounds (%)", scs, rows("final/acc_last10"))
    print_table("Test accuracy, best round (%)", scs, rows("final/acc_best"))
    print_table("Test accuracy, final round (%)", scs, rows("final/acc"))
    best_rg = [(v, lambda sc, v=v: _verdict(runs, sc, v)) for v in fedrgs]
    print_table("FedRG last-10 minus max(SCE last-10, FedAvg best round), points", scs, best_rg)
    det = []
    for v in fedrgs:
        det += [(f"{v}: geometry", lambda sc, v=v: cell(runs[sc, v], f"last/{GEOM}_f1")),
                (f"{v}: small loss, same model", lambda sc, v=v: cell(runs[sc, v], f"last/{SMALL}_f1"))]
    det.append(("fedavg+CE: small loss", lambda sc: cell(runs[sc, "fedavg"], f"last/{PROBE}_f1")))
    print_table("Sample detection F1 at the last round (%), mean over clients", scs, det)
    print_table("Sample detection F1 averaged over the train rounds (%)", scs,
                [(name, lambda sc, name=name, key=key, v=v: cell(runs[sc, v], f"mean/{key}_f1"))
                 for name, v, key in _mean_rows(fedrgs)])
    split = []
    for v in fedrgs:
        for what, key in (("geometry", GEOM), ("small loss", SMALL)):
            split.append((f"{v}: {what}", lambda sc, v=v, key=key: _split(runs[sc, v], key)))
    split.append(("fedavg+CE: small loss", lambda sc: _split(runs[sc, "fedavg"], PROBE)))
    print_table("Detection F1 at the last round within noise-majority / other (client, label) groups (%), pooled",
                scs, split)
    print_table("Noisy samples in noise-majority (client, label) groups", scs,
                [("share", lambda sc: majority_share(out, sc))])
    print_table("Memorization: noisy training samples predicted with their noisy label, last round (%)", scs,
                rows("last/train/memorization"))
    print_table("Mean diag(T) at the last round", scs, rows("last/absorption/diag_mean", fedrgs, scale=1.0, digits=2))


def _mean_rows(fedrgs: list[str]) -> list[tuple[str, str, str]]:
    out = []
    for v in fedrgs:
        out += [(f"{v}: geometry", v, GEOM), (f"{v}: small loss, same model", v, SMALL)]
    return out + [("fedavg+CE: small loss", "fedavg", PROBE)]


def _split(runs: list[dict], key: str) -> str:
    return (cell(runs, f"last/{key}_f1_majority", digits=0) + " / "
            + cell(runs, f"last/{key}_f1_minority", digits=0))


def _verdict(runs: dict, sc: str, v: str) -> str:
    rg, sce, avg = (mean(runs[sc, k], "final/acc_last10") for k in (v, "symmetric_ce", "fedavg"))
    avg_best = mean(runs[sc, "fedavg"], "final/acc_best")
    if rg is None or sce is None or avg_best is None or avg is None:
        return "-"
    return f"{100 * (rg - max(sce, avg_best)):+.1f}"


def final_scores(run: Path, data: Path) -> list[dict[str, np.ndarray]]:
    """Per client: the paper and posterior geometry scores and the CE, recomputed with the run's final
    model and each client's last mixture, templates and soft counts (the noisiness is 1 - score)."""
    import torch
    import torch.nn.functional as F

    from fedcore.data.federated import FederatedDataset
    from fedcore.engine.checkpoint import load_checkpoint
    from fedcore.engine.sampler import client_rngs
    from fedcore.engine.types import ClientTask
    from fedcore.methods.registry import build_method
    from fedcore.metrics import noise_majority
    from fedcore.registries import load_config
    from fedcore.run import make_context
    from fedcore.stats import vmf

    cfg, fed = load_config(run / "config.yaml", ["train.device=cpu"]), FederatedDataset.load(data)
    method = build_method(cfg)
    state = method.init(make_context(cfg, fed, torch.device("cpu")))
    method.model.load_state_dict(torch.load(run / "model.pt", map_location="cpu"))
    clients = load_checkpoint(run / "checkpoints" / "stage-train.pt")["clients"]
    out = []
    for cid, st in enumerate(clients):
        rng, gen = client_rngs(cfg.seed, 10**6, cid)
        task = ClientTask(cid, state.params, method.ctx.clients[cid], {}, st, rng, gen, 10**6, "train")
        z, z1, z2, logits = method.embed(task)
        mix = vmf.VMFMixture(**st["mix"])
        resp = vmf.responsibilities(z, mix, vmf.temper_factor(vmf.aug_concentration(z1, z2), st["median"]),
                                    method.params.normalizer)
        y = task.data.labels
        idx = fed.client_indices[cid]
        out.append({"paper": 1 - vmf.clean_score(resp, st["B"], y.numpy()),
                    "posterior": 1 - vmf.posterior_score(resp, st["counts"], y.numpy()),
                    "small loss": F.cross_entropy(logits, y, reduction="none").numpy(),
                    "noisy": fed.truth.is_noisy_sample[idx],
                    "majority": noise_majority(fed.y_train.numpy()[idx], fed.truth.is_noisy_sample[idx])})
    return out


def auc(run: Path, data: Path) -> None:
    from sklearn.metrics import roc_auc_score

    clients = final_scores(run, data)
    print("| score | AUC, all samples | AUC in noise-majority groups | AUC in the other groups |\n|---|---|---|---|")
    for name in ("paper", "posterior", "small loss"):
        cells = []
        for sel in (None, True, False):
            vals = []
            for c in clients:
                m = np.ones(len(c["noisy"]), bool) if sel is None else c["majority"] == sel
                if m.any() and 0 < c["noisy"][m].mean() < 1:
                    vals.append(roc_auc_score(c["noisy"][m], c[name][m]))
            cells.append(f"{np.mean(vals):.3f}" if vals else "-")
        print(f"| {name} | " + " | ".join(cells) + " |")


def main(argv: list[str]) -> None:
    cmd = argv[0] if argv else ""
    if cmd == "rounds":
        print(total_rounds(argv[1], _sets(argv[2:]))[0])
    elif cmd == "pad":
        print(pad(argv[1], int(argv[2]), _sets(argv[3:])))
    elif cmd == "pads":
        print("\n".join(pads(argv[1], argv[2:])))
    elif cmd == "table":
        table(Path(argv[1]))
    elif cmd == "auc":
        auc(Path(argv[1]), Path(argv[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
