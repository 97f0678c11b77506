"""The bench pipeline's tasks: shared datasets, a tune per method, a run per (setting, seed), the choice.

Each is an adapter over `fedcore.bench.tasks` / `fedcore.bench.selection`; `grid` is the
pipeline input `fedcore.bench.tasks.grid_input` makes, `overrides` the bench's --set list.
"""

# No `from __future__ import annotations`: kfp reads the real annotation objects.
from kfp.dsl import Artifact, Dataset, Input, Model, Output

from components.base import fedcore_component


@fedcore_component
def bench_data(grid: str, overrides: list, scene: str, data: Output[Dataset]):
    """Every seed's shared dataset of the scene (the tuning seed's too), as SCENE/data-sSEED."""
    from fedcore.bench.tasks import prepare

    prepare(grid, overrides, scene, data.path)


@fedcore_component
def bench_tune(grid: str, overrides: list, scene: str, item: dict, data: Input[Dataset],
               tune: Output[Artifact]) -> str:
    """The `fedcore tune` of item's row on the tuning seed; returns `[its record]` (JSON)."""
    import json
    import time

    from fedcore.bench.tasks import tune as run_tune
    from fedcore.pipeline.done import done_line

    start = time.monotonic()
    record = run_tune(grid, overrides, scene, str(item["row"]), data.path, tune.path)
    tune.metadata.update(best_value=record["tune"]["best_value"], n_trials=record["tune"]["n_trials"])
    # kfp.local names a loop's iterations alike: this line says which tune ended (pipelines/progress.py).
    print(done_line(str(item["row"]), scene, False, time.monotonic() - start,
                    f"tune, {record['tune']['n_trials']} trials"), flush=True)
    return json.dumps([record])


@fedcore_component
def bench_run(grid: str, overrides: list, scene: str, item: dict, data: Input[Dataset],
              tracking: Input[Artifact], run: Output[Model], tune: Input[Artifact] = None,
              rows: str = "[]", seed: int = -1) -> str:
    """One default or tuned run (item: row, setting and seed, or `seed`); returns `rows` plus its row (JSON)."""
    import json
    import time

    from fedcore.bench.tasks import run as bench_run
    from fedcore.pipeline.done import done_line
    from fedcore.pipeline.runs import parent_of

    start = time.monotonic()
    item = {**item, "seed": seed} if seed >= 0 else item
    row = bench_run(grid, overrides, scene, item, data.path, run.path, tune.path if tune is not None else None,
                    parent_of(tracking.path))
    what = f"{row['setting']} s{row['seed']}" + (", diverged" if row.get("diverged") else "")
    print(done_line(row["method"], scene, row["setting"] == "tuned", time.monotonic() - start, what), flush=True)
    return json.dumps([*json.loads(rows), row])


@fedcore_component
def choose(grid: str, overrides: list, config: str, scene: str, tuned: list, default_rows: str,
           tracking: Input[Artifact], bench: Output[Artifact], model_prefix: str, previous: str = "{}") -> str:
    """The scene's choice (validation only), bench.json, the chosen model registered as
    PREFIX-SCENE with alias `selected`, all logged on the parent run; returns bench.json so far
    (JSON: `previous` plus this scene)."""
    import json
    from pathlib import Path

    from fedcore.bench.selection import choose_task
    from fedcore.pipeline.inputs import parse_config
    from fedcore.pipeline.runs import parent_of

    records = [*(r for chunk in tuned for r in json.loads(chunk)), *json.loads(default_rows)]
    result = choose_task(grid, overrides, scene, records, Path(bench.path), parse_config(config),
                         parent_of(tracking.path), f"{model_prefix}-{scene}", json.loads(previous))
    bench.metadata["choice"] = result["scenes"][scene]["choice"] or ""
    return json.dumps(result)
