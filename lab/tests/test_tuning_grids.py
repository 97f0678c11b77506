"""The grids under lab/grids/ run the protocol that the retired experiments/tuning.sh ran for the tables of
lab/results/tuning.md: the same scenes, rows, trials, seeds and validation split, and for every tune,
default run and shared artifact the same whole config. tuning.sh retired once this test had checked
these literals against its text; they stay here as the record of what it ran (git history has it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedcore.bench.grid import load_grid
from fedcore.bench.plan import data_jobs, plan_grid
from fedcore.registries import load_config

ROOT = Path(__file__).resolve().parents[2]

# experiments/tuning.sh (retired), as it ran.
BASELINES = ["fedavg", "fedprox", "symmetric_ce", "coteaching", "fednoro", "fedcorr", "dividemix"]
MULTI_BASELINES = ["fedavg", "fedprox"]  # the others refuse multi-label data
TRIALS, TUNE_SEED, SEEDS, VAL = 8, 100, [0, 1, 2], "data.validation.fraction=0.1"
HARMONY_V3 = ["method.params.timing=start", "method.params.teacher=pooled", "method.params.weighting=abs",
              "method.params.diagonal=true", "method.params.scale=sum", "method.params.lam_schedule=caa",
              "method.params.gamma_by=median", "method.params.mask_unannotated=true", "method.params.lam=0.1"]
VARIANT_ARGS = {"fedgr-robust": ["method.params.profile=robust"], "fedharmony-v3": HARMONY_V3}
BASE_METHOD = {"fedgr-robust": "fedgr", "fedharmony-v3": "fedharmony"}
# scene -> (grid file, the scene's own method, its rows). Rows: tuning.sh's default_methods, plus
# fedgr-robust on FedGR's scenes (the page's METHODS="fedgr-robust fedgr ..." session).
SCENES = {
    "fedsir_09": ("fmnist_fedsir_09", "fedsir", [*BASELINES, "fedsir"]),
    **{s: ("fmnist_fedrg", "fedrg", [*BASELINES, "fedrg"]) for s in (
        "fedrg_sym_localized", "fedrg_pair_localized", "fedrg_sym_globalized", "fedrg_pair_globalized")},
    **{s: ("fmnist_fedgr", "fedgr", [*BASELINES, "fedgr", "fedgr-robust"]) for s in ("fedgr_sym", "fedgr_mixed")},
    "fedharmony_scenes": ("fmnist_fedharmony_scenes", "fedharmony",
                          [*MULTI_BASELINES, "fedharmony", "fedharmony-v3"]),
    "quickstart": ("quickstart", "", [*BASELINES, "fedsir", "fedrg", "fedgr"]),  # `make run`'s rows
}


def preset_of(scene: str) -> str:
    return "configs/quickstart.yaml" if scene == "quickstart" else f"configs/fmnist/{scene}.yaml"


def method_args(scene: str, row: str) -> list[str]:
    """tuning.sh's method_args: the scene's own method keeps its preset (FedRG 40 rounds after its
    SSL pretraining), any other switches and drops the preset's method params and stage budgets."""
    own, m, extra = SCENES[scene][1], BASE_METHOD.get(row, row), VARIANT_ARGS.get(row, [])
    if m == own:
        return ["train.rounds=40", *extra] if m == "fedrg" else extra
    return [f"method.name={m}", "method.params={}", "train.stage_rounds={}", *extra]


def seed_args(scene: str, seed: int) -> list[str]:
    """`-s seed=S` plus tuning.sh's data_args: a multi-label scene draws its benchmark from the seed."""
    return [f"seed={seed}", *([f"data.params.seed={seed}"] if scene.startswith("fedharmony_") else [])]


def config_of(path: str, overrides: list[str]) -> dict:
    return load_config(path, list(overrides)).to_dict()


GRIDS = sorted({g for g, *_ in SCENES.values()})


def test_the_grids_hold_every_scene_of_the_page_and_the_quickstart():
    scenes = {}
    for g in GRIDS:
        scenes.update({name: g for name in load_grid(ROOT / f"lab/grids/{g}.yaml").scenes})
    assert scenes == {s: g for s, (g, *_) in SCENES.items()}


@pytest.mark.parametrize("grid_name", GRIDS)
def test_a_grid_has_tuning_sh_budget_seeds_and_rows(grid_name):
    grid = load_grid(ROOT / f"lab/grids/{grid_name}.yaml")
    assert (grid.trials, grid.tuning_seed, grid.seeds, grid.validation_fraction) == (TRIALS, TUNE_SEED, SEEDS, 0.1)
    for scene, config in grid.scenes.items():
        assert config.config == preset_of(scene) and config.set == []
        assert grid.methods == SCENES[scene][2]


@pytest.mark.parametrize("grid_name", GRIDS)
def test_every_tune_run_and_artifact_has_the_config_tuning_sh_gave_it(grid_name, tmp_path):
    grid = load_grid(ROOT / f"lab/grids/{grid_name}.yaml")
    out = tmp_path / "out"
    first, after = plan_grid(grid, out, [])
    seen = set()
    for job in first:
        preset = preset_of(job.scene)
        seed = TUNE_SEED if job.kind == "tune" else job.seed
        # tuning.sh: `fedcore tune|run PRESET $(method_args) -s seed=S $(data_args) $VAL`
        want = [*method_args(job.scene, job.row), *seed_args(job.scene, seed), VAL]
        assert config_of(job.config, list(job.overrides)) == config_of(preset, want), job.label
        assert job.data == out / job.scene / f"data-s{seed}"
        seen.add((job.scene, job.row, job.kind, job.setting, seed))
        for tuned in after.get(job, []):
            # tuning.sh: `fedcore run TUNE/best.yaml -s seed=S $(data_args)`: the tune's best config, moved.
            assert Path(tuned.config) == out / job.scene / job.row / "tune" / "best.yaml"
            assert list(tuned.overrides) == seed_args(job.scene, tuned.seed)
            seen.add((tuned.scene, tuned.row, "run", "tuned", tuned.seed))
    assert seen == {(s, r, k, st, sd) for s in grid.scenes for r in SCENES[s][2] for k, st, sd in (
        [("tune", "", TUNE_SEED)] + [("run", st, sd) for st in ("default", "tuned") for sd in SEEDS])}
    # tuning.sh: `fedcore data prepare PRESET -s seed=S $(data_args) $VAL`, once per scene and seed.
    for path, config, overrides in data_jobs(grid, out, []):
        scene, seed = path.parent.name, int(path.name.removeprefix("data-s"))
        assert config_of(config, overrides) == config_of(preset_of(scene), [*seed_args(scene, seed), VAL])
    assert sorted(p.name for p, *_ in data_jobs(grid, out, [])) == sorted(
        f"data-s{s}" for _ in grid.scenes for s in [TUNE_SEED, *SEEDS])


def test_the_quickstart_grid_is_the_one_the_shipped_tuned_sweep_was_made_with():
    from fedcore.pipeline.plan import load_sweep_spec

    grid = load_grid(ROOT / "lab/grids/quickstart.yaml")
    sweep = ROOT / "configs/sweeps/quickstart_tuned.yaml"
    assert set(grid.methods) == set(load_sweep_spec(sweep).method_overrides)
    head = sweep.read_text()
    assert f"per row {grid.trials} trials" in head and f"on seed {grid.tuning_seed}" in head
    assert f"data.validation.fraction={grid.validation_fraction}" in head
