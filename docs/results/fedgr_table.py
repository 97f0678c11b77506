"""Tables for docs/results/fedgr.md from the run dirs written by docs/results/fedgr.sh.

Usage: .venv/bin/python docs/results/fedgr_table.py runs/fedgr [variant ...]
       .venv/bin/python docs/results/fedgr_table.py --sens runs/fedgr-sens runs/fedgr
(--sens: one row per sensitivity variant and preset, with the per-seed accuracies and the
main table's FedAvg and FedGR on the same seeds for reference.)
Accuracy: last-10 test accuracy, mean ± std (population) over seeds. Rate Pearson / MAE: the
last round's value and the mean over all post-warm-up rounds (FedGR only estimates after
warm-up). Sample F1, mask rate and memorization: last round. All from history.csv.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np

ORDER = ["fedavg", "fedprox", "coteaching", "fedcorr", "dividemix", "fedgr", "fedgr-no_fs", "fedgr-no_lr", "fedgr-no_b",
         "fedgr-no_r"]
PRESETS = ["fedgr_digits_noniid_sym", "fedgr_digits_noniid_mixed"]
COMMAND = {
    "fedavg": "-s method.name=fedavg -s 'method.params={}'",
    "fedprox": "-s method.name=fedprox -s 'method.params={}'",
    "coteaching": "-s method.name=coteaching -s 'method.params={}'",
    "fedcorr": "-s method.name=fedcorr -s 'method.params={}'",
    "dividemix": "-s method.name=dividemix -s 'method.params={}'",
    "fedgr": "",
    "fedgr-no_fs": "-s method.params.sieving=false",
    "fedgr-no_lr": "-s method.params.refine=false",
    "fedgr-no_b": "-s method.params.ema_distill=false",
    "fedgr-no_r": "-s method.params.rep_reg=false",
}


def _col(rows: list[dict], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key) not in (None, "")]


def load(run: Path) -> dict:
    summary = json.loads((run / "metrics.json").read_text())["summary"]
    rows = list(csv.DictReader((run / "history.csv").open()))
    out = {"acc": summary["final/acc_last10"]}
    for key, name in (("noise/rate_pearson", "pearson"), ("noise/rate_mae", "mae")):
        vals = _col(rows, key)
        out[name], out[f"{name}_mean"] = (vals[-1], float(np.mean(vals))) if vals else (None, None)
    for key, name in (("detect/sample_f1", "f1"), ("refine/mask_rate", "mask"), ("train/memorization", "mem")):
        vals = _col(rows, key)
        out[name] = vals[-1] if vals else None
    return out


def fmt(vals: list, scale: float = 100.0, digits: int = 1) -> str:
    vals = [v for v in vals if v is not None and np.isfinite(v)]
    if not vals:
        return "-"
    return f"{np.mean(vals) * scale:.{digits}f} ± {np.std(vals) * scale:.{digits}f}"


def table(root: Path, preset: str, names: list[str], seeds=(0, 1, 2)) -> list[str]:
    lines = ["| method | acc last-10 (%) | r_k Pearson last | Pearson mean after warm-up | r_k MAE last "
             "| sample F1 | mask rate | memorized (%) | seeds |", "|---|---|---|---|---|---|---|---|---|"]
    for name in names:
        runs = [load(root / preset / name / f"s{s}") for s in seeds
                if (root / preset / name / f"s{s}" / "metrics.json").is_file()]
        if not runs:
            continue
        col = {k: [r[k] for r in runs] for k in runs[0]}
        lines.append(
            f"| {name} | {fmt(col['acc'])} | {fmt(col['pearson'], 1, 2)} | {fmt(col['pearson_mean'], 1, 2)} "
            f"| {fmt(col['mae'], 1, 3)} | {fmt(col['f1'], 1, 2)} | {fmt(col['mask'], 1, 2)} "
            f"| {fmt(col['mem'])} | {len(runs)} |"
        )
    return lines


def commands(names: list[str]) -> list[str]:
    lines = ["| row | command (CONFIG = configs/<preset>.yaml, DATA = its artifact for SEED) |", "|---|---|"]
    for name in names:
        cmd = f"fedcore run CONFIG --data DATA -s seed=SEED {COMMAND.get(name, '(see text)')}".rstrip()
        lines.append(f"| {name} | `{cmd}` |")
    return lines


HELD_OUT = (3, 4, 5)


def sens_table(root: Path, main_root: Path) -> list[str]:
    """One row per (preset, variant, seed group): development seeds 0-2 and held-out seeds 3-5
    in separate rows. FedAvg / FedGR references come from main_root, else from root."""
    lines = ["| preset | variant | seeds | acc last-10 per seed (%) | mean ± std | FedAvg same seeds "
             "| FedGR (spec) same seeds | r_k Pearson last |", "|---|---|---|---|---|---|---|---|"]

    def ref(preset: str, name: str, seeds: list[int]) -> str:
        got = []
        for s in seeds:
            for base in (main_root, root):
                if (base / preset / name / f"s{s}" / "metrics.json").is_file():
                    got.append(load(base / preset / name / f"s{s}")["acc"])
                    break
        return fmt(got) if len(got) == len(seeds) else "-"

    for preset in PRESETS:
        if not (root / preset).is_dir():  # a grid run on one preset only still gets its table
            continue
        for var in sorted(p.name for p in (root / preset).iterdir() if p.is_dir() and not p.name.startswith("data")):
            found = sorted(int(p.name[1:]) for p in (root / preset / var).glob("s*") if (p / "metrics.json").is_file())
            for seeds in ([s for s in found if s not in HELD_OUT], [s for s in found if s in HELD_OUT]):
                if not seeds:
                    continue
                runs = [load(root / preset / var / f"s{s}") for s in seeds]
                per = " / ".join(f"{r['acc'] * 100:.1f}" for r in runs)
                short = preset.removeprefix("fedgr_digits_noniid_")
                lines.append(f"| {short} | {var} | {','.join(map(str, seeds))} | {per} "
                             f"| {fmt([r['acc'] for r in runs])} | {ref(preset, 'fedavg', seeds)} "
                             f"| {ref(preset, 'fedgr', seeds)} | {fmt([r['pearson'] for r in runs], 1, 2)} |")
    return lines


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--sens":
        print("\n".join(sens_table(Path(argv[1]), Path(argv[2] if len(argv) > 2 else "runs/fedgr"))))
        return
    root = Path(argv[0])
    names = ORDER + argv[1:]
    for preset in PRESETS:
        print(f"\n### {preset}\n")
        print("\n".join(table(root, preset, names)))
    print("\n### Commands\n")
    print("\n".join(commands(names)))


if __name__ == "__main__":
    main(sys.argv[1:])
