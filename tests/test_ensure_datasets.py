"""scripts/ensure-datasets.sh, run for real against a fake dataset folder and a fake apt-get.

The fake apt-get logs its arguments and, on `install`, writes the four files the way the
Debian package does; nothing on this machine is installed or removed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "ensure-datasets.sh"
FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")

FAKE_APT = """#!/usr/bin/env bash
echo "$*" >> "{log}"
if [[ "$1" == update ]]; then touch "{lists}"; exit 0; fi
[[ "$1" == install && "$*" == *dataset-fashion-mnist* ]] || exit 100
[[ "{needs_update}" == 0 || -f "{lists}" ]] || exit 100   # E: Unable to locate package
mkdir -p "{folder}"
for f in {files}; do echo gz > "{folder}/$f.gz"; done
"""


def fake_apt(tmp_path: Path, needs_update: bool = False, works: bool = True) -> Path:
    apt = tmp_path / "apt-get"
    body = FAKE_APT.format(log=tmp_path / "apt.log", lists=tmp_path / "lists", folder=tmp_path / "fmnist",
                           needs_update=int(needs_update), files=" ".join(FILES))
    apt.write_text(body if works else f'#!/usr/bin/env bash\necho "$*" >> "{tmp_path / "apt.log"}"\nexit 100\n')
    apt.chmod(0o755)
    return apt


def run(tmp_path: Path, uid: int, apt: Path | str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "FMNIST_DIR": str(tmp_path / "fmnist"), "APT_GET": str(apt),
           "ENSURE_UID": str(uid)}
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


def apt_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "apt.log"
    return log.read_text().splitlines() if log.exists() else []


def test_present_files_mean_nothing_to_do(tmp_path: Path):
    (tmp_path / "fmnist").mkdir()
    for f in FILES:
        (tmp_path / "fmnist" / f"{f}.gz").write_text("gz")
    out = run(tmp_path, 0, fake_apt(tmp_path))
    assert out.returncode == 0 and out.stdout == "" and out.stderr == ""
    assert apt_calls(tmp_path) == []


@pytest.mark.parametrize("needs_update", [False, True])
def test_root_installs_the_package(tmp_path: Path, needs_update: bool):
    out = run(tmp_path, 0, fake_apt(tmp_path, needs_update))
    assert out.returncode == 0 and "installed dataset-fashion-mnist" in out.stdout
    calls = apt_calls(tmp_path)
    assert calls[0] == "install -y -qq dataset-fashion-mnist"
    assert calls[1:] == (["update -qq", "install -y -qq dataset-fashion-mnist"] if needs_update else [])
    assert all((tmp_path / "fmnist" / f"{f}.gz").is_file() for f in FILES)


def test_non_root_gets_one_line_saying_what_to_run(tmp_path: Path):
    out = run(tmp_path, 1000, fake_apt(tmp_path))
    assert out.returncode == 0 and apt_calls(tmp_path) == []
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and "sudo apt-get install -y dataset-fashion-mnist" in lines[0]


def test_a_failed_install_warns_in_one_line_and_does_not_fail(tmp_path: Path):
    out = run(tmp_path, 0, fake_apt(tmp_path, works=False))
    assert out.returncode == 0 and len(apt_calls(tmp_path)) == 3  # install, update, install
    assert len(out.stderr.splitlines()) == 1 and "did not provide" in out.stderr


def test_no_apt_get_at_all(tmp_path: Path):
    out = run(tmp_path, 0, tmp_path / "missing-apt-get")
    assert out.returncode == 0 and "no apt-get here" in out.stderr and len(out.stderr.splitlines()) == 1
