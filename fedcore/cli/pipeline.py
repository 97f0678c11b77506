"""`fedcore pipeline compile|run|submit|schedule`: one pipeline object, laptop or cluster."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from fedcore.cli.console import ConfigArg, group, list_option, local_folder, make_console, set_option
from fedcore.deploy import env as deploy_env
from fedcore.errors import ConfigError, UserError

app = group("Compile, run locally, submit and schedule the Kubeflow pipelines.",
            "the Kubeflow pipelines: compile, run, submit, schedule")
console = make_console()

NameArg = Annotated[str, typer.Argument(help="pipeline: experiment, sweep, retrain or bench (then pass a grid)")]
SetOpt = set_option("dotted config override (repeatable); passed as the run-time input `overrides`")
MethodsOpt = list_option("--method", "sweep: methods to include")
SeedsOpt = list_option("--seed", "sweep: training seeds", ints=True)
SweepOpt = Annotated[Path | None, typer.Option("--sweep", help="sweep YAML: methods, seeds, settings; retrain: "
                                                "train its `selected` method (or --method) at its overrides")]
ImageOpt = Annotated[str | None, typer.Option("--image", help="container image of every task")]
GpuTypeOpt = Annotated[str | None, typer.Option(
    "--gpu-type", help=f"accelerator resource (default: {deploy_env.GPU_RESOURCE})")]
GpusOpt = Annotated[int | None, typer.Option(
    "--gpus", help="accelerators per training stage; 0 = CPU nodes (default: 1, or 0 with train.device=cpu)")]
WorkersOpt = Annotated[int | None, typer.Option(
    "--workers", help="nodes per training stage; above 1 each stage runs as a Kubeflow Trainer TrainJob "
    "(--gpus ranks per node), see docs/deploy.md")]
SelectorOpt = Annotated[list[str] | None, typer.Option(
    "--node-selector", help="k=v for training stages on GPUs (default: "
    + ", ".join(f"{k}={v}" for k, v in deploy_env.GPU_NODE_SELECTOR.items()) + ")")]
PrefixOpt = Annotated[str, typer.Option("--data-prefix", help="retrain: s3:// prefix of dated data snapshots")]
ModelOpt = Annotated[str, typer.Option("--model-name", help="retrain: registered model name")]
TrackOpt = Annotated[bool, typer.Option("--tracking/--no-tracking", help="record runs in MLflow")]
UriOpt = Annotated[str | None, typer.Option("--tracking-uri", help="MLflow tracking URI of the runs (default: the "
                                            "config's tracking.uri, else MLFLOW_TRACKING_URI, else an embedded "
                                            "store: ./mlruns, or under --out for --local)")]
HostOpt = Annotated[str, typer.Option("--host", help="KFP API URL, e.g. http://localhost:8080")]
ExperimentOpt = Annotated[str, typer.Option("--experiment", help="KFP experiment to file the run under")]
ParallelOpt = Annotated[int, typer.Option("--parallelism", min=0,
                                           help="sweep: settings (with --fold: runs) trained at once (0 = no limit)")]
ResourceOpt = Annotated[list[str] | None, typer.Option(
    "--resource", help="task resources field=value (repeatable), e.g. stage_memory_limit=32Gi; see docs/pipelines.md")]
RunnerOpt = Annotated[str, typer.Option(
    "--runner", help="--local: subprocess (this Python) or docker (each task in --image, as a hardened pod: "
    "uid 10001, read-only root, no capabilities, no network but --network)")]
NetworkOpt = Annotated[str, typer.Option(
    "--network", help="--runner docker: the tasks' only network (fedcore-stack: the tracking stack's; none)")]
EnvFileOpt = Annotated[Path | None, typer.Option(
    "--env-file", help="--runner docker: KEY=VALUE file of the tasks' environment, as seen from --network "
    "(make stack-up writes .stack/tasks.env)")]
PackageOpt = Annotated[Path | None, typer.Option(
    "--package", help="run a compiled package as it is (no recompiling); --set/--method/--seed become its inputs")]


def find_config(name: str = "quickstart.yaml") -> Path:
    """configs/<name> from the working directory or the source checkout."""
    for base in (Path.cwd(), Path(__file__).resolve().parents[2]):
        p = base / "configs" / name
        if p.is_file():
            return p
    raise ConfigError(f"configs/{name} not found; run from the fedcore checkout")


def _options(ctx_args: dict[str, Any], local: bool = False) -> Any:
    from fedcore.pipeline.plan import load_sweep_spec  # lazy: CLI start-up
    from fedcore.pipeline.resources import PipelineResources  # lazy: CLI start-up
    from pipelines import PipelineOptions  # lazy: CLI start-up

    res = PipelineResources().with_cli(ctx_args.get("image"), ctx_args.get("gpu_type"), ctx_args.get("gpus"),
                                       ctx_args.get("node_selector"), ctx_args.get("resource"),
                                       ctx_args.get("workers"))
    if local:
        res = local_resources(res)
    spec = load_sweep_spec(ctx_args.get("sweep"), {"methods": ctx_args.get("method"), "seeds": ctx_args.get("seed")})
    return PipelineOptions(resources=res, sweep=spec, data_prefix=ctx_args.get("data_prefix") or "",
                           model_name=ctx_args.get("model_name") or "", parallelism=ctx_args.get("parallelism") or 0,
                           overrides=tuple(ctx_args.get("set_") or ()), fold=bool(local and ctx_args.get("fold")),
                           sweep_file=str(ctx_args.get("sweep") or ""))


def local_resources(res: Any) -> Any:
    """Locally kfp honours only the retry policy: a failing task should fail at once, not after backoffs."""
    return res.model_copy(update={"retries": 0})


def base_config(config: Path | None, tracking: bool, local_root: Path | None, task_env: dict | None = None,
                uri: str | None = None):
    """The default of a pipeline's `config` input: tracking on by default, pinned to a local store for --local
    unless `uri` (--tracking-uri) or the config names one.

    `task_env`: the environment of tasks that do not share this process's (--runner docker)."""
    from fedcore.registries import load_config  # lazy: CLI start-up

    sets = ["tracking.backend=mlflow", *([f"tracking.uri={uri}"] if uri else [])] if tracking else \
        ["tracking.backend=none"]
    cfg = load_config(config or find_config(), sets)
    if tracking and local_root is not None and not cfg.tracking.uri:
        store = local_store(local_root, task_env)
        cfg = cfg.model_copy(update={"tracking": cfg.tracking.model_copy(update=store)})
    return cfg


def load_pipeline_config(config: Path | None, overrides: list[str] | None, tracking: bool, local_root: Path | None,
                         task_env: dict | None = None, uri: str | None = None):
    """What the pipeline runs by default: the base config with the `--set` overrides applied
    (checked here, so a bad override fails before anything is compiled)."""
    from fedcore.pipeline.plan import apply  # lazy: CLI start-up
    from fedcore.registries import check_data_root  # lazy: CLI start-up

    return check_data_root(apply(base_config(config, tracking, local_root, task_env, uri), overrides or []))


def local_store(root: Path, task_env: dict | None = None) -> dict[str, str]:
    """Tasks run in their own processes: give them one absolute embedded MLflow store, or the
    MLFLOW_TRACKING_URI of their environment (this process's, or `task_env` for containers)."""
    from fedcore.tracking.mlflow import embedded_store  # lazy: CLI start-up

    env = os.environ if task_env is None else task_env
    if env.get("MLFLOW_TRACKING_URI"):
        return {"uri": env["MLFLOW_TRACKING_URI"]}
    # Containers see only the pipeline root (kfp.local mounts it at the same path): keep the store in it.
    uri, artifacts = embedded_store((root if task_env is None else root / "kfp").resolve())
    return {"uri": uri, "artifact_location": artifacts}


def build(name: str, base: Any, args: dict[str, Any], local: bool = False) -> Any:
    """The pipeline for `base` (its `config` default) and the --set list (its `overrides` default)."""
    from pipelines import build_pipeline  # lazy: CLI start-up

    return build_pipeline(name, base, _options(args, local))


def run_arguments(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """The run-time inputs the options ask for: overrides, and a sweep's methods and seeds."""
    out: dict[str, Any] = {}
    if args.get("set_"):
        out["overrides"] = list(args["set_"])
    if name == "sweep":
        out.update({k: list(args[a]) for k, a in (("methods", "method"), ("seeds", "seed")) if args.get(a)})
    return out


def package_config(package: Path, overrides: list[str] | None) -> Any:
    """The config a compiled package runs: its `config` default plus the --set list."""
    from fedcore.pipeline.inputs import parse_config  # lazy: CLI start-up
    from pipelines.runner import load_specs  # lazy: CLI start-up

    spec, _ = load_specs(package)
    params = spec.root.input_definitions.parameters
    if "config" not in params:
        raise UserError(f"'{package}' is not a fedcore pipeline package (it has no `config` input)")
    return parse_config(params["config"].default_value.string_value, overrides or [])


@app.command("compile", short_help="compile a pipeline into a KFP package")
def compile_cmd(name: NameArg,
                config: Annotated[Path | None, typer.Argument(help="config (default: quickstart)")] = None,
                out: Annotated[Path | None, typer.Option("--out", "-o", help="YAML package to write (default "
                                                         "runs/NAME.yaml)")] = None,
                set_: SetOpt = None, method: MethodsOpt = None, seed: SeedsOpt = None, sweep: SweepOpt = None,
                parallelism: ParallelOpt = 0, image: ImageOpt = None, gpu_type: GpuTypeOpt = None,
                gpus: GpusOpt = None, workers: WorkersOpt = None, node_selector: SelectorOpt = None,
                resource: ResourceOpt = None, data_prefix: PrefixOpt = "", model_name: ModelOpt = "",
                tracking: TrackOpt = True, tracking_uri: UriOpt = None,
                katib: Annotated[bool, typer.Option("--katib", help="bench: also write each (scene, method) tune "
                                                    "as a Katib Experiment, to OUT's stem + .katib.yaml")] = False,
                ) -> None:
    """Compile a pipeline into a KFP package (checked by parsing it back); the config and the
    --set list become the defaults of its run-time inputs `config` and `overrides`."""
    from pipelines.runner import compile_pipeline, load_specs  # lazy: CLI start-up

    if name == "bench":
        from fedcore.cli.pipeline_bench import compile_bench  # lazy: CLI start-up

        line = compile_bench(locals(), out, _options(locals()))
        console.print(line, soft_wrap=True, markup=False, highlight=False)
        return
    if katib:
        raise UserError("--katib applies to the bench pipeline (fedcore pipeline compile bench GRID --katib)")
    base = base_config(config, tracking, None, uri=tracking_uri)
    cfg = load_pipeline_config(config, set_, tracking, None, uri=tracking_uri)
    path = compile_pipeline(build(name, base, locals()), out or Path("runs") / f"{name}.yaml")
    spec, _ = load_specs(path)
    inputs = ", ".join(sorted(spec.root.input_definitions.parameters))
    cfg = package_config(path, set_)  # what it trains: retrain --sweep changed the config input
    console.print(f"wrote {path} ({len(spec.root.dag.tasks)} top-level tasks, config {cfg.config_hash()}; "
                  f"run-time inputs: {inputs})")


@app.command("run", short_help="run a pipeline here (kfp.local)")
def run_cmd(name: NameArg,
            config: Annotated[Path | None, typer.Argument(help="experiment YAML (not with --package)")] = None,
            local: Annotated[bool, typer.Option("--local", help="run here with kfp.local")] = False,
            out: Annotated[Path, typer.Option("--out", "-o", help="local run dir")] = Path("runs/pipeline"),
            package: PackageOpt = None, set_: SetOpt = None, method: MethodsOpt = None, seed: SeedsOpt = None,
            sweep: SweepOpt = None, parallelism: ParallelOpt = 0, data_prefix: PrefixOpt = "",
            model_name: ModelOpt = "", tracking: TrackOpt = True, tracking_uri: UriOpt = None,
            fold: Annotated[bool, typer.Option(
                "--fold", help="sweep: one task per run, so kfp.local trains --parallelism runs side by side "
                "(default: one task per stage, the cluster's shape)")] = False,
            runner: RunnerOpt = "subprocess", image: ImageOpt = None, network: NetworkOpt = "none",
            env_file: EnvFileOpt = None) -> None:
    """Run a pipeline on this machine (the same pipeline object a cluster runs), or a compiled package."""
    if not local:
        raise UserError("`fedcore pipeline run` runs on this machine: pass --local "
                        "(`fedcore pipeline submit` sends it to a cluster)")
    from pipelines.docker import from_options  # lazy: CLI start-up

    out = local_folder(out)
    if name == "bench":
        from fedcore.cli.pipeline_bench import print_bench, run_bench  # lazy: CLI start-up

        args = locals()
        store = ({"uri": tracking_uri} if tracking_uri else local_store(out)) if tracking else {}
        print_bench(run_bench(args, out, console, _options(args, local=True), store), out, console)
        from fedcore.cli.pipeline_bench import bench_config  # lazy: CLI start-up

        cfg = bench_config(args, store)[2]  # where the tunes, runs and parent run went, as the others end
        if cfg.tracking.backend != "none":
            console.print(f"MLflow: {mlflow_hint(cfg)}", soft_wrap=True, markup=False, highlight=False)
        return
    docker = from_options(locals())
    task_env = None if docker is None else docker.env
    if package is not None:
        result, cfg = run_package(package, locals(), out)
    else:
        if config is None:
            raise UserError("pass the experiment config (e.g. configs/quickstart.yaml), or --package PIPELINE.yaml")
        cfg = load_pipeline_config(config, set_, tracking, out, task_env, tracking_uri)
        result = run_local_pipeline(name, base_config(config, tracking, out, task_env, tracking_uri), locals(), out)
    print_result(name, result, cfg, out)


def run_local_pipeline(name: str, base: Any, args: dict[str, Any], out: Path) -> Any:
    from pipelines.runner import run_local  # lazy: CLI start-up

    pipeline = build(name, base, args, local=True)  # bad methods/sweeps fail here, before anything runs
    where = "locally" if args.get("docker") is None else f"in {args['docker'].image} (docker)"
    console.print(f"running pipeline [bold]{name}[/] {where} (task logs: {out / 'kfp-local.log'})")
    return run_local(pipeline, out, docker=args.get("docker"), **run_arguments(name, args))


def run_package(package: Path, args: dict[str, Any], out: Path) -> tuple[Any, Any]:
    """Run a compiled package under kfp.local with the options as its run-time inputs."""
    from kfp import components  # lazy: CLI start-up

    from pipelines.runner import run_local  # lazy: CLI start-up

    if args.get("config") is not None:
        raise UserError("--package runs the config compiled into the package; drop the config argument "
                        "(change it with --set)")
    if not package.is_file():
        raise UserError(f"--package '{package}' not found; compile one with `fedcore pipeline compile`")
    overrides = list(args.get("set_") or compiled_overrides(package))
    store = package_store(package_config(package, overrides), out, args.get("task_env"))
    if store:  # a run-time list replaces the compiled one, so it carries the compiled --set too
        overrides += store
        args = {**args, "set_": overrides}
    cfg = package_config(package, overrides)
    pipeline = components.load_component_from_file(str(package))
    console.print(f"running package [bold]{package}[/] locally (task logs: {out / 'kfp-local.log'})")
    return run_local(pipeline, out, docker=args.get("docker"), **run_arguments(args["name"], args)), cfg


def compiled_overrides(package: Path) -> list[str]:
    """The `overrides` input's default: the --set list the package was compiled with."""
    from google.protobuf import json_format  # lazy: CLI start-up

    from pipelines.runner import load_specs  # lazy: CLI start-up

    spec, _ = load_specs(package)
    param = spec.root.input_definitions.parameters.get("overrides")
    if param is None or not param.HasField("default_value"):
        return []
    return [str(v) for v in json_format.MessageToDict(param.default_value) or []]


def package_store(cfg: Any, out: Path, task_env: dict | None = None) -> list[str]:
    """Overrides that put a package's embedded MLflow store under `out`, as a compiled config's is.

    A package compiled for a cluster names no store, and its tasks would otherwise open the
    embedded default in the working directory (issue 71.2). A tracking.uri in the package or the
    --set list, or MLFLOW_TRACKING_URI in the tasks' environment, still says where runs go."""
    import json  # lazy: CLI start-up

    if cfg.tracking.backend == "none" or cfg.tracking.uri:
        return []
    store = local_store(out, task_env)
    if "artifact_location" not in store:  # the environment names the server; the tasks see it too
        return []
    # JSON-quoted: an override's value is read as YAML, and a path may hold ': ' or ' #'.
    return [f"tracking.{key}={json.dumps(value)}" for key, value in store.items()]


def print_result(name: str, result: Any, cfg: Any, out: Path, console: Console = console) -> None:
    """The pipeline's records as the comparison table, then where its artifacts and MLflow runs are."""
    from fedcore.reporting.compare import merge_notes  # lazy: CLI start-up
    from fedcore.reporting.terminal import terminal_table  # lazy: CLI start-up

    records = getattr(result, "records", None)
    if records:
        console.print(terminal_table(records, by="group", title=f"{name} pipeline"))
        for note in merge_notes(records, by="group"):
            console.print(f"note: {note}", soft_wrap=True, markup=False, highlight=False)
    # soft_wrap: paths and the command stay on one line, ready to copy.
    console.print(f"run dir: {out}  (kfp artifacts in {out / 'kfp'}, task logs in {out / 'kfp-local.log'})",
                  soft_wrap=True, markup=False, highlight=False)
    if cfg.tracking.backend != "none":
        console.print(f"MLflow: {mlflow_hint(cfg)}", soft_wrap=True, markup=False, highlight=False)


def mlflow_hint(cfg: Any) -> str:
    """The command that opens the run's MLflow store, or the server URL."""
    from fedcore.tracking.mlflow import resolve_uri, ui_command  # lazy: CLI start-up

    # No client: opening the store only to print a path costs seconds of MLflow start-up.
    uri, default_artifacts = resolve_uri(cfg.tracking.uri)
    where = ui_command(uri, cfg.tracking.artifact_location or default_artifacts) or \
        f"{uri} (experiment '{cfg.tracking.experiment}')"
    # MLflow 3's UI opens on its GenAI pages whatever the experiment's tag says (docs/pipelines.md).
    return f"{where}; in the UI choose 'Model training', or add ?workflowType=machine_learning to the URL"


def _package(name: str, base: Any, args: dict[str, Any], tmp: str) -> Path:
    from pipelines.runner import compile_pipeline  # lazy: CLI start-up

    return compile_pipeline(build(name, base, args), Path(tmp) / f"{name}.yaml")


@app.command("submit", short_help="start a run on a Kubeflow Pipelines cluster")
def submit_cmd(name: NameArg,
               config: Annotated[Path | None, typer.Argument(help="experiment YAML (not with --package)")] = None,
               host: HostOpt = "", experiment: ExperimentOpt = "fedcore",
               run_name: Annotated[str | None, typer.Option("--run-name")] = None,
               package: PackageOpt = None, set_: SetOpt = None, method: MethodsOpt = None, seed: SeedsOpt = None,
               sweep: SweepOpt = None, parallelism: ParallelOpt = 0, image: ImageOpt = None,
               gpu_type: GpuTypeOpt = None, gpus: GpusOpt = None, workers: WorkersOpt = None,
               node_selector: SelectorOpt = None, resource: ResourceOpt = None, data_prefix: PrefixOpt = "",
               model_name: ModelOpt = "", tracking: TrackOpt = True, tracking_uri: UriOpt = None) -> None:
    """Start one run on a Kubeflow Pipelines cluster: compile the config, or send a compiled
    --package as it is; --set (and a sweep's --method/--seed) become the run's inputs."""
    from pipelines.runner import check_host, submit  # lazy: CLI start-up

    check_host(host)
    args = locals()
    with tempfile.TemporaryDirectory(prefix="fedcore-pipeline-") as tmp:
        if name == "bench":
            from fedcore.cli.pipeline_bench import bench_package  # lazy: CLI start-up

            package, args = bench_package(args, Path(tmp), _options(args))
            cfg = package_config(package, [])
        elif package is not None:
            cfg = package_config(package, set_)
        else:
            cfg = load_pipeline_config(config, set_, tracking, None, uri=tracking_uri)
            package = _package(name, base_config(config, tracking, None, uri=tracking_uri), args, tmp)
        sa = _options(args).resources.service_account
        run_id = submit(host, package, experiment, run_name or f"{name} {cfg.method.name} {cfg.config_hash()[:8]}",
                        sa, run_arguments(name, args))
    console.print(f"submitted run {run_id}: {host.rstrip('/')}/#/runs/details/{run_id}")


@app.command("schedule", short_help="create a recurring run (retraining)")
def schedule_cmd(name: NameArg, config: ConfigArg, host: HostOpt,
                 cron: Annotated[str, typer.Option("--cron", help="6 fields, seconds first: '0 0 2 * * *'")],
                 experiment: ExperimentOpt = "fedcore",
                 job_name: Annotated[str | None, typer.Option("--job-name")] = None,
                 set_: SetOpt = None, image: ImageOpt = None, gpu_type: GpuTypeOpt = None, gpus: GpusOpt = None,
                 workers: WorkersOpt = None, node_selector: SelectorOpt = None, resource: ResourceOpt = None,
                 data_prefix: PrefixOpt = "",
                 model_name: ModelOpt = "", tracking: TrackOpt = True, tracking_uri: UriOpt = None) -> None:
    """Create a recurring run (one at a time, no catch-up), e.g. nightly retraining."""
    from pipelines.runner import check_cron, check_host, schedule  # lazy: CLI start-up

    check_host(host)
    check_cron(cron)
    cfg = load_pipeline_config(config, set_, tracking, None, uri=tracking_uri)
    args = locals()
    with tempfile.TemporaryDirectory(prefix="fedcore-pipeline-") as tmp:
        package = _package(name, base_config(config, tracking, None, uri=tracking_uri), args, tmp)
        sa = _options(args).resources.service_account
        job = schedule(host, package, experiment, job_name or f"{name}-{cfg.config_hash()[:8]}", cron, sa)
    console.print(f"scheduled recurring run {job} ({cron}): {host.rstrip('/')}/#/recurringruns/details/{job}")
