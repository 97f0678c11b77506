"""`fedcore deploy ...`: render, check and smoke-test the Kubernetes deployment.

Thin wrappers over `fedcore.deploy.k8s`; `fedcore.cli` registers this `app` as `deploy`.
"""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
import yaml

from fedcore.cli.console import TrackingOpt, TrackingUriOpt, group, list_option, set_option, tracking_sets
from fedcore.deploy import env, k8s, stack
from fedcore.deploy.mlflow_auth import setup
from fedcore.deploy.stack import client_credential_problems
from fedcore.errors import UserError

app = group("Render, check and smoke-test the Kubernetes deployment (k8s/).",
            "render, check and smoke-test the k8s/ deployment")


class Overlay(StrEnum):
    local = "local"
    gpu = "gpu"


OverlaysOpt = list_option("--overlay", "overlays to check, local or gpu (default: all)")
VersionsOpt = list_option("--k8s-version", "Kubernetes schema versions")
ExperimentsOpt = list_option("--experiment", "experiments the pod user gets EDIT on (default: fedcore)")
ModelsOpt = list_option("--model", "registered models the pod user gets MANAGE on")
SetOpt = set_option()
ParamsOpt = list_option(("--param", "-p"), "tune only these declared params (default: every declared one)")


def overlays(names: list[str] | None) -> list[Overlay] | None:
    """--overlay's items as overlays; an unknown one is a one-line error."""
    known = [o.value for o in Overlay]
    for name in names or []:
        if name not in known:
            raise UserError(f"--overlay '{name}': choose {' or '.join(known)}")
    return None if names is None else [Overlay(n) for n in names]


K8sDirOpt = Annotated[
    Path | None, typer.Option("--k8s-dir", help="the repo's k8s/ directory (default: found from the cwd)")
]


@app.command("render", short_help="print an overlay's Kubernetes manifests")
def render_cmd(
    overlay: Annotated[Overlay, typer.Option("--overlay", help="local (CPU, kind/minikube) or gpu")] = Overlay.local,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="write here instead of stdout")] = None,
    k8s_dir: K8sDirOpt = None,
) -> None:
    """Print the manifests of one overlay (pipe into `kubectl apply -f -`).

    Pods use the project image named by FEDCORE_IMAGE when it is set."""
    from fedcore.io import atomic_write  # lazy: CLI start-up

    if out is not None and out.is_dir():
        raise UserError(f"--out '{out}' is a folder; pass a file path such as {out / (overlay.value + '.yaml')}")
    text = k8s.render(overlay.value, k8s_dir, image=env.image())
    if out is None:
        sys.stdout.write(text)
        return
    # Atomic (and creates missing parent folders): a failed write never leaves half a manifest.
    with atomic_write(out, "w", encoding="utf-8") as f:
        f.write(text)
    typer.echo(f"wrote {out} ({len(k8s.load_objects(text))} objects)", err=True)


@app.command("check", short_help="validate the manifests and the policy")
def check_cmd(
    overlay: OverlaysOpt = None,
    k8s_version: VersionsOpt = None,
    k8s_dir: K8sDirOpt = None,
) -> None:
    """Render overlays, validate every object strictly and apply the security policy; then the same
    for a TrainJob and a Katib Experiment as fedcore renders them. Exit 1 on any problem."""
    versions = k8s_version or list(k8s.K8S_VERSIONS)
    failed = False
    for item in overlays(overlay) or list(Overlay):
        problems = stack.check(item.value, versions, k8s_dir)
        typer.echo(f"{item.value}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
        for problem in problems:
            typer.echo(f"  {problem}")
        failed = failed or bool(problems)
    problems = workload_problems()
    typer.echo(f"workloads (TrainJob, Katib Experiment): {'ok' if not problems else f'{len(problems)} problem(s)'}")
    for problem in problems:
        typer.echo(f"  {problem}")
    if failed or problems:
        raise typer.Exit(1)


def workload_problems(objects: list[dict] | None = None) -> list[str]:
    """Problems of what fedcore creates at run time (fedcore.tuning.katib.workloads)."""
    from fedcore.pipeline.trainjob import trainjob_problems  # lazy: CLI start-up
    from fedcore.tuning.katib import workloads  # lazy: CLI start-up

    trainjob, *katib = objects or workloads(str(k8s.k8s_root().parent / "configs" / "quickstart.yaml"))
    return trainjob_problems(trainjob) + katib_problems(katib)


@app.command("smoke", short_help="check MLflow, the bucket and the cache from a pod")
def smoke_cmd(
    require_gpu: Annotated[bool, typer.Option("--require-gpu", help="fail unless CUDA sees a device")] = False,
) -> None:
    """Check from inside a pod that MLflow, the bucket and the cache are usable."""
    problems = k8s.smoke(require_gpu)
    for problem in problems:
        typer.echo(f"FAIL {problem}")
    if problems:
        raise typer.Exit(1)
    typer.echo("smoke: MLflow, S3 bucket and cache are usable" + (", GPU visible" if require_gpu else ""))


@app.command("mlflow-auth", short_help="create MLflow's pod user (the auth Job)")
def mlflow_auth_cmd(
    experiment: ExperimentsOpt = None,
    model: ModelsOpt = None,
) -> None:
    """Create or update MLflow's non-admin pod user (what the mlflow-auth-setup Job runs).

    Reads MLFLOW_TRACKING_URI, the admin from FEDCORE_MLFLOW_ADMIN_USERNAME / _PASSWORD and the
    pod user from MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD."""

    need = ("MLFLOW_TRACKING_URI", "FEDCORE_MLFLOW_ADMIN_USERNAME", "FEDCORE_MLFLOW_ADMIN_PASSWORD",
            "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
    missing = [k for k in need if not os.environ.get(k)]
    if missing:
        raise UserError(f"{', '.join(missing)} not set: the Job takes them from fedcore-env, fedcore-mlflow-admin "
                        "and fedcore-mlflow-client")
    done = setup(os.environ["MLFLOW_TRACKING_URI"],
                 (os.environ["FEDCORE_MLFLOW_ADMIN_USERNAME"], os.environ["FEDCORE_MLFLOW_ADMIN_PASSWORD"]),
                 (os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"]),
                 experiment or ["fedcore"], model or [])
    for line in done:
        typer.echo(line)


@app.command("katib", short_help="render a tune as a Katib Experiment")
def katib_cmd(
    config: Annotated[Path, typer.Argument(help="experiment YAML (its tracking section should name the cluster's "
                                           "MLflow, e.g. backend: mlflow with MLFLOW_TRACKING_URI from fedcore-env)")],
    trials: Annotated[int, typer.Option("--trials", "-n", min=1, help="Katib's maxTrialCount")] = 8,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="write here instead of stdout")] = None,
    set_: SetOpt = None,
    param: ParamsOpt = None,
    objective: Annotated[str, typer.Option("--objective", help="last10 or best (on validation)")] = "last10",
    data: Annotated[str | None, typer.Option("--data", help="s3:// prefix of the FederatedDataset artifact every "
                                             "trial reads (default: each trial builds it from data.root)")] = None,
    parallel: Annotated[int, typer.Option("--parallel", min=1, help="Katib's parallelTrialCount")] = 2,
    name: Annotated[str | None, typer.Option("--name", help="Experiment name (default fedcore-tune-<method>)")] = None,
    image: Annotated[str | None, typer.Option("--image", help="trial image (default: FEDCORE_IMAGE or the "
                                              "release image)")] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", min=0, help="GPUs per trial (default 1 unless "
                                             "train.device=cpu)")] = None,
    tracking: TrackingOpt = None,
    tracking_uri: TrackingUriOpt = None,
) -> None:
    """Render the tune's search space as a Katib Experiment (plus its config ConfigMap), validated offline.

    Same space and validation objective as `fedcore tune`; apply with `kubectl apply -n fedcore -f FILE`."""
    from fedcore.io import atomic_write  # lazy: CLI start-up
    from fedcore.pipeline.resources import PipelineResources  # lazy: CLI start-up
    from fedcore.registries import load_config  # lazy: CLI start-up
    from fedcore.tuning.katib import experiment, katib_name  # lazy: CLI start-up
    from fedcore.tuning.space import search_space  # lazy: CLI start-up
    from fedcore.tuning.study import DEFAULT_VALIDATION, OBJECTIVES  # lazy: CLI start-up

    if objective not in OBJECTIVES:
        raise UserError(f"--objective '{objective}': choose one of {', '.join(OBJECTIVES)}")
    set_ = [*(set_ or []), *tracking_sets(tracking, tracking_uri)]
    cfg = load_config(config, set_)
    if not (cfg.data.validation.fraction > 0 or cfg.data.validation.server_clean > 0):
        cfg = load_config(config, [*set_, f"data.validation.fraction={DEFAULT_VALIDATION}"])
    dims = search_space(cfg, param)
    if not dims:
        raise UserError(f"nothing to tune for method '{cfg.method.name}': no declared ranges")
    res = PipelineResources().with_cli(image=image or env.image(), gpus=gpus)
    # `fedcore run --katib-metrics` prints the score under a task-free name (acc, or mAP on multi-label runs).
    objects = experiment(cfg, cfg.to_yaml(), dims, OBJECTIVES[objective].format(m="score"), trials, res,
                         name or katib_name(f"fedcore-tune-{cfg.method.name}"), parallel, data)
    problems = katib_problems(objects)
    if problems:  # a bug of the renderer, never the user's: say so loudly
        raise RuntimeError("rendered Katib Experiment is invalid: " + "; ".join(problems))

    text = yaml.safe_dump_all(objects, sort_keys=False)
    if out is None:
        sys.stdout.write(text)
        return
    with atomic_write(out, "w", encoding="utf-8") as f:
        f.write(text)
    typer.echo(f"wrote {out}: Experiment {objects[1]['metadata']['name']} ({len(dims)} params, {trials} trials, "
               f"objective {objects[1]['spec']['objective']['objectiveMetricName']})", err=True)


def katib_problems(objects: list[dict]) -> list[str]:
    """Schema and policy problems of [ConfigMap, Experiment] and of the trial Job inside."""
    from fedcore.tuning.katib import validate_experiment  # lazy: CLI start-up

    job = objects[1]["spec"]["trialTemplate"]["trialSpec"]
    named = {**job, "metadata": {"name": "trial"}}
    return (validate_experiment(objects[1]) + k8s.validate([objects[0], named])
            + k8s.policy_violations([objects[0], named]) + client_credential_problems([named]))
