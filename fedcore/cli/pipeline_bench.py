"""`fedcore pipeline compile|run bench GRID`: the bench protocol (`fedcore bench`) as a pipeline.

The grid takes the config argument's place. Every scene gets the tracking settings as
overrides after its own (`tracking.backend=mlflow`, and for --local the run dir's embedded
store), so tunes, runs, the parent run and the registry share one MLflow store.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import yaml

from fedcore.cli.bench import choice_line
from fedcore.cli.deploy import katib_problems
from fedcore.errors import UserError


def tracking_overrides(tracking: bool, store: dict[str, str] | None = None) -> list[str]:
    """The tracking settings every scene gets; `store`: a local run's MLflow store (uri, artifact_location)."""
    if not tracking:
        return ["tracking.backend=none"]
    return ["tracking.backend=mlflow", *(f"tracking.{k}={v}" for k, v in (store or {}).items())]


def bench_pipeline(args: dict[str, Any], options: Any, store: dict[str, str] | None = None) -> tuple[Any, Any]:
    """(pipeline, grid) of `fedcore pipeline ... bench GRID`; options: the CLI's PipelineOptions."""
    from pipelines import build_pipeline  # lazy: CLI start-up

    if args.get("config") is None:
        raise UserError("pass the grid: fedcore pipeline compile bench GRID.yaml (e.g. configs/grids/tiny.yaml)")
    if args.get("sweep") is not None or args.get("data_prefix"):
        raise UserError("--sweep and --data-prefix are not bench options; a grid names the methods and seeds")
    grid, cli_set, base = bench_config(args, store)
    options = dataclasses.replace(options, grid=grid, overrides=tuple(cli_set))
    return build_pipeline("bench", base, options), grid


def bench_config(args: dict[str, Any], store: dict[str, str] | None = None) -> tuple[Any, list[str], Any]:
    """(grid, the overrides every scene gets, the config holding the parent run's tracking settings)."""
    from fedcore.bench.grid import load_grid  # lazy: CLI start-up
    from fedcore.bench.plan import shared_overrides  # lazy: CLI start-up
    from fedcore.registries import load_config  # lazy: CLI start-up

    user = list(args.get("set_") or [])
    grid = load_grid(args["config"], seeds=args.get("seed") or None, methods=args.get("method") or None, shared=user)
    store = store or ({"uri": args["tracking_uri"]} if args.get("tracking_uri") else None)
    cli_set = [*tracking_overrides(args.get("tracking", True), store), *user]
    first = next(iter(grid.scenes.values()))
    return grid, cli_set, load_config(first.config, shared_overrides(grid, first, cli_set))


def compile_bench(args: dict[str, Any], out: Path | None, options: Any) -> str:
    """Compile; returns the line the CLI prints."""
    from pipelines.runner import compile_pipeline, load_specs  # lazy: CLI start-up

    pipeline, grid = bench_pipeline(args, options)
    if args.get("katib") and grid.start_at_default:
        raise UserError("Katib cannot start a tune at a given setting: set start_at_default: false in the grid "
                        "for --katib (the pipeline's own tunes honour it; true is the grids' default)")
    path = compile_pipeline(pipeline, out or Path("runs") / "bench.yaml")
    spec, _ = load_specs(path)
    inputs = ", ".join(sorted(spec.root.input_definitions.parameters))
    line = (f"wrote {path} ({len(grid.scenes)} scenes x {len(grid.methods)} methods, {grid.trials} trials, "
            f"seeds {grid.seeds}; run-time inputs: {inputs})")
    if args.get("katib"):
        katib = write_katib(grid, args, options.resources, path.with_name(f"{path.stem}.katib.yaml"))
        line += f"; wrote {katib} (a Katib Experiment per scene and method)"
    return line


def write_katib(grid: Any, args: dict[str, Any], res: Any, out: Path) -> Path:
    """Each (scene, method) tune of the grid as a Katib Experiment and its config ConfigMap, as
    `fedcore deploy katib` renders one (same space, trials and validation objective, on the
    tuning seed), in one file for `kubectl apply -n fedcore -f`. The pipeline still tunes with
    Optuna in its own tasks: these are for running the same tunes under Katib instead."""
    from fedcore.bench.plan import row_base, seed_overrides  # lazy: CLI start-up
    from fedcore.io import atomic_write_bytes  # lazy: CLI start-up
    from fedcore.registries import load_config  # lazy: CLI start-up
    from fedcore.tuning.katib import experiment, katib_name  # lazy: CLI start-up
    from fedcore.tuning.space import search_space  # lazy: CLI start-up
    from fedcore.tuning.study import OBJECTIVES  # lazy: CLI start-up

    store = {"uri": args["tracking_uri"]} if args.get("tracking_uri") else None
    cli_set = [*tracking_overrides(args.get("tracking", True), store), *(args.get("set_") or [])]
    objects: list[dict] = []
    for name, scene in grid.scenes.items():
        for row in grid.methods:
            cfg = load_config(scene.config, [*row_base(grid, name, row, cli_set),
                                             *seed_overrides(scene, grid.tuning_seed)])
            pair = experiment(cfg, cfg.to_yaml(), search_space(cfg), OBJECTIVES["last10"].format(m="score"),
                              grid.trials, res, katib_name(f"fedcore-bench-{name}-{row}"))
            if problems := katib_problems(pair):  # a renderer bug, never the user's
                raise RuntimeError("rendered Katib Experiment is invalid: " + "; ".join(problems))
            objects += pair
    atomic_write_bytes(out, yaml.safe_dump_all(objects, sort_keys=False).encode())
    return out


def run_bench(args: dict[str, Any], out: Path, console: Any, options: Any, store: dict[str, str]) -> Any:
    """Run locally under kfp.local; returns bench.json's content (the last choose task's output)."""
    from pipelines.runner import run_local  # lazy: CLI start-up

    if args.get("package") is not None or args.get("runner", "subprocess") != "subprocess":
        raise UserError("`pipeline run bench` runs the grid itself under the subprocess runner; "
                        "drop --package and --runner")
    pipeline, _ = bench_pipeline(args, options, store)
    console.print(f"running pipeline [bold]bench[/] locally (task logs: {out / 'kfp-local.log'})")
    result = run_local(pipeline, out)
    # The scenes' choose tasks are chained: the last bench.json holds every scene.
    found = [json.loads(p.read_text()) for p in sorted((result.run_dir or out).glob("**/bench.json"))]
    return publish_bench(max(found, key=lambda b: len(b.get("scenes", {})), default={}), out)


def publish_bench(bench: dict[str, Any], out: Path) -> dict[str, Any]:
    """OUT/bench.json and OUT/SCENE/tuned_sweep.yaml, where `fedcore bench` puts them (the
    kfp artifacts stay where they are); returns bench.json with the sweep paths moved."""
    from fedcore.io import atomic_write_bytes  # lazy: CLI start-up

    for name, scene in bench.get("scenes", {}).items():
        if scene.get("sweep"):
            dest = out / name / "tuned_sweep.yaml"
            atomic_write_bytes(dest, Path(scene["sweep"]).read_bytes())
            scene["sweep"] = str(dest)
    if bench:
        atomic_write_bytes(out / "bench.json", json.dumps(bench, indent=2).encode())
    return bench


def print_bench(result: dict[str, Any], out: Path, console: Any) -> None:
    """Each scene's choice line (as `fedcore bench` prints it), its registered model, and where things are."""
    for name, scene in result.get("scenes", {}).items():
        console.print(choice_line(name, scene), markup=False, highlight=False, soft_wrap=True)
        if scene.get("model"):
            m = scene["model"]
            console.print(f"  registered {m['name']} version {m['version']} as @{m['alias']} (tuned run, seed "
                          f"{m['seed']})", markup=False, highlight=False, soft_wrap=True)
        if scene.get("sweep"):
            console.print(f"  sweep file: {scene['sweep']}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"run dir: {out}  (kfp artifacts in {out / 'kfp'}, task logs in {out / 'kfp-local.log'})",
                  soft_wrap=True, markup=False, highlight=False)


def bench_package(args: dict[str, Any], tmp: Path, options: Any) -> tuple[Path, dict[str, Any]]:
    """(package to submit, args without --set): a --package as it is, else the grid compiled into `tmp`.

    The --set list is compiled into the `overrides` input after the tracking settings; a
    submit-time list would replace both, so it is refused for a compiled package."""
    from pipelines.runner import compile_pipeline  # lazy: CLI start-up

    if args.get("package") is not None:
        if args.get("set_") or args.get("config") is not None:
            raise UserError("bench: --set and the grid are compiled into the package; recompile with "
                            "`fedcore pipeline compile bench GRID --set ...`")
        return args["package"], args
    pipeline, _ = bench_pipeline(args, options)
    return compile_pipeline(pipeline, tmp / "bench.yaml"), {**args, "set_": None}
