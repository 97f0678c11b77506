"""Shared fixtures for the deployment tests: rendered overlays and repo paths.

Rendering needs `kubectl` (its bundled kustomize). `make test` installs it through
scripts/ensure-kubectl.sh; a missing kubectl fails these tests instead of skipping them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedcore.deploy import k8s as deploy

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict]]:
    """overlay name -> rendered objects, rendered once per session."""
    assert deploy.find_kubectl(), f"kubectl missing: run scripts/ensure-kubectl.sh ({deploy.KUBECTL_HINT})"
    return {name: deploy.load_objects(deploy.render(name, K8S)) for name in deploy.OVERLAYS}


@pytest.fixture(scope="session")
def secret_templates() -> list[dict]:
    docs = []
    for path in sorted((K8S / "secrets").glob("*.template.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def find(objects: list[dict], kind: str, name: str) -> dict:
    """The one object of that kind and name (generated ConfigMaps match by prefix)."""
    hits = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].startswith(name)]
    assert len(hits) == 1, f"{kind}/{name}: {len(hits)} matches"
    return hits[0]


def containers(obj: dict) -> list[dict]:
    spec = deploy.pod_spec(obj) or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
