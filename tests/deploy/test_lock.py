"""The image's hashed lock (docker/requirements.lock, `make lock`) agrees with pyproject.toml, and
the Dockerfile installs from it with --require-hashes only."""

from __future__ import annotations

import hashlib
import importlib.util
import re

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .conftest import REPO
from .dockerfile import stages

LOCK = REPO / "docker" / "requirements.lock"
DOCKERFILE = (REPO / "Dockerfile").read_text()
_spec = importlib.util.spec_from_file_location("lock_script", REPO / "scripts" / "lock.py")
lock_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lock_script)


def pins(text: str) -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes) of every entry of a pip lock."""
    out, current = {}, None
    for line in text.splitlines():
        entry = re.match(r"^([A-Za-z0-9][\w.-]*)==(\S+) \\$", line)
        if entry:
            current = canonicalize_name(entry[1])
            out[current] = (entry[2], 0)
        elif current and re.match(r"^\s+--hash=sha256:[0-9a-f]{64}", line):
            out[current] = (out[current][0], out[current][1] + 1)
        elif line and not line.startswith(("#", " ")):
            raise AssertionError(f"lock line is neither a hashed pin nor a comment: {line!r}")
    return out


def disagreements(pyproject: str, build_in: str, lock: str) -> list[str]:
    """Why `lock` does not lock `pyproject` (empty: it does)."""
    problems = []
    header = lock.splitlines()[0] if lock else ""
    if header != lock_script.DIGEST_PREFIX + lock_script.inputs_digest(pyproject, build_in):
        problems.append("the lock's inputs digest is not pyproject's: run `make lock`")
    locked = pins(lock)
    for text in lock_script.lock_inputs(pyproject, build_in):
        req = Requirement(text)
        name = canonicalize_name(req.name)
        if name not in locked:
            problems.append(f"{req.name} is not in the lock")
        elif not req.specifier.contains(locked[name][0], prereleases=True):
            problems.append(f"{req.name}: locked {locked[name][0]} is outside {req.specifier}")
    problems += [f"{name}=={v} has no hash" for name, (v, n) in locked.items() if n == 0]
    return problems


PYPROJECT = (REPO / "pyproject.toml").read_text()
BUILD_IN = (REPO / "docker" / "build-requirements.in").read_text()


def test_the_lock_agrees_with_pyproject_and_hashes_every_pin():
    assert disagreements(PYPROJECT, BUILD_IN, LOCK.read_text()) == []
    locked = pins(LOCK.read_text())
    assert locked["torch"][0] == "2.14.1" and {"setuptools", "wheel", "nvidia-ml-py"} <= set(locked)


@pytest.mark.parametrize(("old", "new", "said"), [
    ('"scipy>=1.11"', '"scipy>=99"', "scipy: locked"),          # a bound the lock no longer meets
    ('"psutil>=5.9",', '"psutil>=5.9", "pendulum>=3",', "pendulum is not in the lock"),  # a new dependency
    ('"torch==2.14.1"', '"torch==2.14.2"', "digest"),            # any change wants a new lock
])
def test_a_pyproject_change_without_make_lock_is_caught(old, new, said):
    assert old in PYPROJECT
    problems = disagreements(PYPROJECT.replace(old, new), BUILD_IN, LOCK.read_text())
    assert any(said in p for p in problems), problems


def test_an_unhashed_pin_is_caught():
    lock = LOCK.read_text().replace("wheel==", "wheel-unhashed==", 1)
    lock = re.sub(r"(^wheel-unhashed==\S+) \\\n(\s+--hash=\S+( \\)?\n)+", r"\1 \\\n", lock, flags=re.M)
    assert any("wheel-unhashed" in p and "no hash" in p for p in disagreements(PYPROJECT, BUILD_IN, lock))


def test_the_dockerfile_installs_only_from_the_hashed_lock():
    build = stages(DOCKERFILE)[0]
    assert any(c.startswith("docker/requirements.lock ") for c in build.all("COPY"))
    assert any("pip install --require-hashes --no-deps -r /tmp/requirements.lock" in r for r in build.all("RUN"))
    # Every other pip step adds no package of its own: fedcore's wheel, built without build downloads
    # and installed without an index.
    runs = [r for stage in stages(DOCKERFILE) for r in stage.all("RUN")]
    others = [r for r in runs if re.search(r"pip (install|wheel)", r) and "--require-hashes" not in r]
    assert others and all("--no-deps" in r and ("--no-build-isolation" in r or "--no-index" in r)
                          for r in others), others


def test_the_base_image_is_pinned_by_digest_with_its_tag_in_a_comment():
    for stage in stages(DOCKERFILE):
        if stage.image in {s.name for s in stages(DOCKERFILE)}:
            continue  # a stage built FROM an earlier stage
        assert re.search(r"@sha256:[0-9a-f]{64}$", stage.image), stage.image
    tag = stages(DOCKERFILE)[0].image.split("@")[0]
    assert re.search(rf"^#.*{re.escape(tag)}", DOCKERFILE, re.M)


def test_the_stack_lock_hashes_every_pin_and_matches_the_clients_mlflow():
    stack_in = (REPO / "docker" / "stack-requirements.in").read_text()
    lock = (REPO / "docker" / "stack-requirements.lock").read_text()
    assert lock.splitlines()[0] == lock_script.DIGEST_PREFIX + hashlib.sha256(stack_in.encode()).hexdigest(), \
        "docker/stack-requirements.in changed without `make lock`"
    locked = pins(lock)
    assert all(n > 0 for _, n in locked.values())
    assert {"mlflow", "psycopg", "boto3", "moto", "flask-wtf"} <= set(locked)
    # The server the stack runs is the version the clients (the image's lock) speak to.
    assert locked["mlflow"][0] == pins(LOCK.read_text())["mlflow"][0]
