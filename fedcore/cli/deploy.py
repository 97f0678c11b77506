"""`fedcore deploy ...`: render, check and smoke-test the Kubernetes deployment.

Thin wrappers over `fedcore.deploy.k8s`; `fedcore.cli` registers this `app` as `deploy`.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from fedcore.deploy import env, k8s
from fedcore.errors import UserError

app = typer.Typer(help="Render, check and smoke-test the Kubernetes deployment (k8s/).", no_args_is_help=True)


class Overlay(StrEnum):
    local = "local"
    gpu = "gpu"


K8sDirOpt = Annotated[
    Path | None, typer.Option("--k8s-dir", help="the repo's k8s/ directory (default: found from the cwd)")
]


@app.command("render")
def render_cmd(
    overlay: Annotated[Overlay, typer.Option("--overlay", help="local (CPU, kind/minikube) or gpu")] = Overlay.local,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="write here instead of stdout")] = None,
    k8s_dir: K8sDirOpt = None,
) -> None:
    """Print the manifests of one overlay (pipe into `kubectl apply -f -`).

    Pods use the project image named by FEDCORE_IMAGE when it is set."""
    from fedcore.io import atomic_write

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


@app.command("check")
def check_cmd(
    overlay: Annotated[
        list[Overlay] | None, typer.Option("--overlay", help="overlay to check (repeatable; default: all)")
    ] = None,
    k8s_version: Annotated[
        list[str] | None, typer.Option("--k8s-version", help="Kubernetes schema version (repeatable)")
    ] = None,
    k8s_dir: K8sDirOpt = None,
) -> None:
    """Render overlays, validate every object strictly and apply the security policy."""
    versions = k8s_version or list(k8s.K8S_VERSIONS)
    failed = False
    for item in overlay or list(Overlay):
        problems = k8s.check(item.value, versions, k8s_dir)
        typer.echo(f"{item.value}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
        for problem in problems:
            typer.echo(f"  {problem}")
        failed = failed or bool(problems)
    if failed:
        raise typer.Exit(1)


@app.command("smoke")
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
