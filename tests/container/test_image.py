"""The built image, checked from outside: its Python is the tests' Python, its dependencies are
consistent, it carries no compiler or source tree, and it runs as uid 10001 on a read-only root."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

from .conftest import HARDENED, REPO, docker, in_image

COMPILERS = ("gcc", "cc", "c++", "g++", "clang", "make", "as", "ld")


def test_the_interpreter_is_the_one_the_tests_run_on(image):
    version = in_image(image, "python3", "-c", "import sys; print(*sys.version_info[:3], sep='.')").stdout.strip()
    assert version.split(".")[:2] == [str(v) for v in sys.version_info[:2]], (version, sys.version)
    # The full version equals this machine's Debian python3 where there is one (the image's base is Debian 12).
    debian = Path("/usr/bin/python3")
    if Path("/etc/debian_version").read_text().startswith("12") and debian.exists():
        import subprocess

        host = subprocess.run([str(debian), "-c", "import platform; print(platform.python_version())"],
                              capture_output=True, text=True).stdout.strip()
        assert version == host, (version, host)
    assert platform.python_implementation() == "CPython"


def test_pip_check_passes_and_fedcore_is_installed_not_editable(image):
    assert in_image(image, "pip", "check").returncode == 0
    where = in_image(image, "python3", "-c", "import fedcore, components, pipelines; print(fedcore.__file__)")
    assert where.stdout.strip().startswith("/opt/venv/lib/python3"), where.stdout


def test_no_compiler_and_no_source_tree(image):
    found = in_image(image, "sh", "-c", "for c in " + " ".join(COMPILERS) + "; do command -v $c; done; "
                     "ls -d /src /home/fedcore/fedcore /opt/venv/src 2>/dev/null; "
                     "find / -xdev \\( -name .git -o -name pyproject.toml -o -name 'test_*.py' \\) "
                     "-path '*fedcore*' 2>/dev/null; true")
    assert found.stdout.strip() == "", found.stdout


def test_runs_as_uid_10001_and_the_root_filesystem_can_be_read_only(image):
    config = json.loads(docker("image", "inspect", image).stdout)[0]["Config"]
    assert config["User"] == "10001:10001"
    ids = in_image(image, "sh", "-c", "id -u; id -g; touch /opt/venv/x 2>/dev/null && echo writable; "
                   "touch /tmp/x && echo tmp-ok", flags=tuple(HARDENED))
    assert ids.stdout.split() == ["10001", "10001", "tmp-ok"], ids.stdout
    # The NVIDIA runtime mounts the driver only into images that ask for it.
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and "compute" in env["NVIDIA_DRIVER_CAPABILITIES"]


def test_fedcore_run_with_no_network_writes_metrics_owned_by_10001(image, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)  # the bind mount keeps the host's owner; uid 10001 must be able to write here
    cfg = REPO / "configs" / "quickstart.yaml"
    run = docker("run", "--rm", *HARDENED, "--network", "none", "-v", f"{out}:/out", "-v",
                 f"{cfg}:/cfg/quickstart.yaml:ro", image, "fedcore", "run", "/cfg/quickstart.yaml", "--out",
                 "/out/run", "--set", "train.rounds=2", "--set", "tracking.backend=none", check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    metrics = out / "run" / "metrics.json"
    assert metrics.is_file(), sorted(p.name for p in out.rglob("*"))
    assert metrics.stat().st_uid == 10001
    assert "final/acc_last10" in json.loads(metrics.read_text())["summary"]


def test_the_dataset_cache_is_writable_on_a_read_only_root(image):
    # s3:// datasets are staged into FEDCORE_CACHE; under a read-only root it must sit on the /tmp tmpfs.
    out = in_image(image, "sh", "-c", 'mkdir -p "$FEDCORE_CACHE" && echo "$FEDCORE_CACHE"', flags=tuple(HARDENED))
    assert out.stdout.strip().startswith("/tmp/"), out.stdout
