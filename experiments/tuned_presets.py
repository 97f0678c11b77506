"""Ship the tuned settings of docs/results/tuning.md as configs a user runs as they are.

    python experiments/tuned_presets.py RUNS [CONFIGS]     (defaults: runs/tuning, configs/fmnist)
    python experiments/tuned_presets.py --sweep RUNS/SCENE OUT.yaml

For every finished tune under RUNS/SCENE/ROW/tune (experiments/tuning.sh), writes
CONFIGS/tuned/SCENE/ROW.yaml: the scene's preset with the row's method, the tuned train values and
method params from the tune's best.yaml, and the validation split the tune ran with. The scene
presets stay as they are: they are every table's "default" column and every method's shared base.
A file is rewritten only when its content changes (atomically), so a rerun is a no-op.

--sweep writes one scene's tuned settings as a sweep file instead (`method_overrides`: each row's
tuned values, after its method switch), which runs every row at its tuned setting in one sweep
pipeline; `fedcore quickstart` reads configs/sweeps/quickstart_tuned.yaml, written this way.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

HEADER = """\
# Tuned setting of `{row}` on `{scene}` (docs/results/tuning.md), written by experiments/tuned_presets.py
# from {tune}: {n} trials ({pruned} pruned) of `fedcore tune` on seed {seed} (a seed no table reports),
# objective {objective} = {value:.4f} on the clients' held-out validation split (noisy labels).
# Base: configs/fmnist/{scene}.yaml; changed: {changed}.
# Run: fedcore run configs/fmnist/tuned/{scene}/{row}.yaml   (seed 0; the tables report seeds 0, 1, 2)
"""


def tuned_preset(preset: dict, best: dict, tune: dict) -> tuple[dict, list[str]]:
    """(config, changed keys): the preset with best.yaml's method and tuned values, seed left as the preset's."""
    out = json.loads(json.dumps(preset))  # a deep copy that stays plain YAML types
    changed = []
    method = best["method"]
    if out.get("method", {}).get("name") != method["name"]:
        changed.append("method.name")
    out["method"] = {"name": method["name"], **({"params": method["params"]} if method.get("params") else {})}
    if method.get("params"):
        changed.append("method.params")
    if best["train"].get("stage_rounds") != out.get("train", {}).get("stage_rounds", {}):
        out.setdefault("train", {})["stage_rounds"] = best["train"]["stage_rounds"]
        changed.append("train.stage_rounds")
    if best["train"].get("rounds") != out.get("train", {}).get("rounds"):
        out["train"]["rounds"] = best["train"]["rounds"]
        changed.append("train.rounds")
    for path in tune["best_params"]:
        section, key = path.split(".", 1)
        if section == "train":
            out.setdefault("train", {})[key] = best["train"][key]
            changed.append(path)
    out.setdefault("data", {})["validation"] = {"fraction": best["data"]["validation"]["fraction"]}
    changed.append("data.validation.fraction")
    return out, sorted(set(changed))


def write_sweep(scene_dir: Path, out: Path) -> bool:
    from fedcore.bench.sweepfile import read_tunes, sweep_text

    tunes = read_tunes(scene_dir)
    if not tunes:
        raise SystemExit(f"no finished tune under {scene_dir}/*/tune; run experiments/tuning.sh first")
    best = yaml.safe_load((scene_dir / next(iter(tunes)) / "tune" / "best.yaml").read_text())
    text = sweep_text(scene_dir.name, scene_dir, tunes, best["data"]["validation"]["fraction"],
                      "experiments/tuned_presets.py --sweep")
    return write_if_changed(out, text)


def write_if_changed(path: Path, text: str) -> bool:
    from fedcore.bench.sweepfile import write_if_changed as write

    return write(path, text)


def main(argv: list[str]) -> None:
    if argv[:1] == ["--sweep"]:
        if len(argv) != 3:
            raise SystemExit("usage: tuned_presets.py --sweep RUNS/SCENE OUT.yaml")
        written = write_sweep(Path(argv[1]), Path(argv[2]))
        print(f"tuned sweep: {argv[2]} {'written' if written else 'unchanged'}")
        return
    runs = Path(argv[0]) if argv else Path("runs/tuning")
    configs = Path(argv[1]) if len(argv) > 1 else Path("configs/fmnist")
    written = 0
    for tune_json in sorted(runs.glob("*/*/tune/tune.json")):
        tune_dir = tune_json.parent
        row, scene = tune_dir.parent.name, tune_dir.parent.parent.name
        preset_path = configs / f"{scene}.yaml"
        if not preset_path.is_file():
            print(f"skip {tune_dir}: no preset {preset_path}", file=sys.stderr)
            continue
        tune = json.loads(tune_json.read_text())
        best = yaml.safe_load((tune_dir / "best.yaml").read_text())
        cfg, changed = tuned_preset(yaml.safe_load(preset_path.read_text()), best, tune)
        header = HEADER.format(row=row, scene=scene, tune=tune_dir, n=tune["n_trials"], pruned=tune["n_pruned"],
                               seed=tune["seed"], objective=tune["objective"], value=tune["best_value"],
                               changed=", ".join(changed))
        text = header + yaml.safe_dump(cfg, sort_keys=False, width=120)
        written += write_if_changed(configs / "tuned" / scene / f"{row}.yaml", text)
    print(f"tuned presets: {written} written under {configs / 'tuned'}")


if __name__ == "__main__":
    main(sys.argv[1:])
