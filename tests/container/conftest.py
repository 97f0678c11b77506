"""The container tests: the project image built once (`make image`), then checked from outside.

FEDCORE_TEST_IMAGE=NAME:TAG names the image (default: the one pipeline tasks run); with
FEDCORE_TEST_IMAGE_BUILT=1 it is checked as it is, without building.

Without a Docker daemon they are skipped with one line saying how to run them; with
FEDCORE_REQUIRE_DOCKER=1 (what .ci/run sets) a missing daemon or a failed build fails them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("FEDCORE_TEST_IMAGE", "ghcr.io/fedcore/fedcore:0.1.0")
HOW = ("container tests skipped: no Docker daemon here. Run them with Docker running (Debian: apt-get install "
       "docker.io; dockerd &) and FEDCORE_REQUIRE_DOCKER=1 make test")
# The flags a hardened pod gets (k8s/base securityContext), as `docker run` options.
HARDENED = ["--user", "10001:10001", "--read-only", "--tmpfs", "/tmp:rw,nosuid,nodev,size=1g,mode=1777",
            "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]


def required() -> bool:
    return os.environ.get("FEDCORE_REQUIRE_DOCKER", "") not in ("", "0")


def docker_ready() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


def pytest_collection_modifyitems(config, items):
    ours = [i for i in items if Path(str(i.fspath)).is_relative_to(Path(__file__).parent)]
    if not ours or docker_ready():
        return
    if required():
        return  # the `image` fixture fails them, loudly
    config._fedcore_container_skip = True
    for item in ours:
        item.add_marker(pytest.mark.skip(reason=HOW))


def pytest_terminal_summary(terminalreporter, config):
    if getattr(config, "_fedcore_container_skip", False):
        terminalreporter.write_line(HOW)


def docker(*args: str, check: bool = True, timeout: float = 900, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, **kw)
    if check and out.returncode:
        raise AssertionError(f"docker {' '.join(args[:3])} ... failed ({out.returncode}): {out.stderr[-2000:]}")
    return out


@pytest.fixture(scope="session")
def image() -> str:
    """The project image, built once per session by `make image` (cached layers make a rebuild short)."""
    if not docker_ready():
        pytest.fail("FEDCORE_REQUIRE_DOCKER is set but no Docker daemon answers `docker info`")
    if os.environ.get("FEDCORE_TEST_IMAGE_BUILT") == "1":  # check an image built or pulled elsewhere, as it is
        docker("image", "inspect", IMAGE)
        return IMAGE
    out = subprocess.run(["bash", "scripts/build-image.sh"], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "IMAGE": IMAGE}, timeout=3600)
    assert out.returncode == 0, f"make image failed:\n{out.stderr[-3000:]}"
    assert out.stdout.strip().splitlines()[-1] == f"image: {IMAGE}", out.stdout
    return IMAGE


def in_image(image: str, *cmd: str, flags: tuple[str, ...] = (), check: bool = True) -> subprocess.CompletedProcess:
    return docker("run", "--rm", *flags, image, *cmd, check=check)
