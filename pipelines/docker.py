"""Pipeline tasks in the project image: kfp.local's DockerRunner under a hardened pod's settings.

Each task runs as the cluster runs it (k8s/base's securityContext): numeric non-root user
10001, a read-only root filesystem with a tmpfs on /tmp, every capability dropped,
no-new-privileges, and no network but the one named (the tracking stack's, `make stack-up`).
kfp.local mounts the pipeline root at the same path, so artifacts come back to the host.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedcore.errors import UserError

TASK_USER = "10001:10001"  # the image's user, as the Dockerfile and k8s/base run it
TMPFS = {"/tmp": "rw,nosuid,nodev,size=2g,mode=1777"}
# What the subprocess runner gives tasks (pipelines.runner._one_thread_per_task), so both runners
# compute the same numbers: intra-op threads change a float sum's order.
TASK_DEFAULTS = {"OMP_NUM_THREADS": "1"}
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


@dataclass(frozen=True)
class DockerTasks:
    """How tasks run under `--runner docker`: the image, the network, the tasks' environment."""

    image: str
    network: str = "none"
    env: dict[str, str] = field(default_factory=dict)

    def run_args(self) -> dict[str, Any]:
        """docker-py `containers.run` arguments of every task (kfp.local passes them through)."""
        return {
            "user": TASK_USER,
            "read_only": True,
            "tmpfs": dict(TMPFS),
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "network_mode": self.network,
            "environment": {**TASK_DEFAULTS, **self.env},
        }


def from_options(args: dict[str, Any]) -> DockerTasks | None:
    """`fedcore pipeline run`'s --runner choice: None (subprocess) or the containers' settings."""
    from fedcore.deploy.env import image as default_image

    runner = args.get("runner") or "subprocess"
    if runner not in ("subprocess", "docker"):
        raise UserError(f"--runner '{runner}' is not one of: subprocess, docker")
    if runner == "subprocess":
        for flag, key in (("--image", "image"), ("--env-file", "env_file")):
            if args.get(key):
                raise UserError(f"{flag} applies to --runner docker only")
        return None
    if args.get("package") is not None and args.get("image"):
        raise UserError("--package runs the images compiled into it; drop --image (or compile with --image)")
    env = read_env_file(args["env_file"]) if args.get("env_file") else {}
    return DockerTasks(image=args.get("image") or default_image(), network=args.get("network") or "none", env=env)


def read_env_file(path: str | Path) -> dict[str, str]:
    """KEY=VALUE lines (comments, blanks and `export` allowed; one pair of quotes stripped)."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise UserError(f"--env-file '{path}' cannot be read ({err.strerror}); pass a KEY=VALUE file, "
                        "e.g. the .stack/tasks.env that `make stack-up` writes") from None
    env = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _ENV_LINE.match(line)
        if not m:
            raise UserError(f"--env-file '{path}' line {n} is not KEY=VALUE")
        value = m.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[m.group(1)] = value
    return env


def docker_client() -> Any:
    """A docker-py client to a running daemon, or a one-line UserError saying what is missing."""
    try:
        import docker
    except ImportError:
        raise UserError("--runner docker needs the Docker SDK for Python: pip install 'fedcore[docker]' "
                        "(or pip install docker)") from None
    try:
        client = docker.from_env()
        client.ping()
    except Exception as err:  # docker-py raises DockerException, requests' and urllib3's errors
        raise UserError(f"--runner docker: no Docker daemon answers ({type(err).__name__}); start Docker "
                        "(systemctl start docker, or dockerd &) and check DOCKER_HOST") from None
    return client


def check(tasks: DockerTasks, client: Any = None) -> None:
    """The image exists locally (kfp.local would try to pull it) and the network exists."""
    import docker

    client = client or docker_client()
    try:
        client.images.get(tasks.image)
    except docker.errors.ImageNotFound:
        raise UserError(f"image '{tasks.image}' is not on this machine; build it with `make image` "
                        f"(IMAGE={tasks.image})") from None
    if tasks.network not in ("none", "bridge", "host"):
        try:
            client.networks.get(tasks.network)
        except docker.errors.NotFound:
            raise UserError(f"docker network '{tasks.network}' does not exist; start the tracking stack "
                            "with `make stack-up`, or pass --network none") from None


def prepare_root(pipeline_root: Path) -> None:
    """Let the task user write the pipeline root (a bind mount keeps the host's owner and mode)."""
    pipeline_root.mkdir(parents=True, exist_ok=True)
    uid, gid = (int(x) for x in TASK_USER.split(":"))
    if os.geteuid() == 0:
        os.chown(pipeline_root, uid, gid)
    else:  # not root: the folder must still be writable for uid 10001
        pipeline_root.chmod(0o777)


def runner(tasks: DockerTasks) -> Any:
    from kfp import local

    return local.DockerRunner(**tasks.run_args())
