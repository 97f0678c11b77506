"""The project Dockerfile (and the compose-only SeaweedFS one): pinned bases, multi-stage,
non-root final user, no secrets, no build tools or editable installs, pins equal to
pyproject.toml, and a build context that leaves local files out."""

from __future__ import annotations

import re
import subprocess
import tomllib

import pytest

from fedcore.deploy import k8s as deploy

from .conftest import REPO
from .dockerfile import ignored, instructions, stages

DOCKERFILE = (REPO / "Dockerfile").read_text()
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|ACCESS_KEY|API_KEY|CREDENTIAL", re.I)
BUILD_TOOLS = ("build-essential", "gcc", "g++", "make", "python3-dev", "python3-pip", "git", "cmake")


def test_reader_joins_continuations_and_resolves_global_args():
    text = "ARG BASE=img:1.2\n# c\nFROM ${BASE} AS a\nRUN one \\\n  # inner\n  two\nFROM a\nUSER 7\n"
    assert instructions(text)[2] == ("RUN", "one two")
    first, second = stages(text)
    assert (first.image, first.name, second.image) == ("img:1.2", "a", "a")
    assert second.all("USER") == ["7"]


def test_multi_stage_on_a_pinned_debian_12_base():
    built = stages(DOCKERFILE)
    assert len(built) >= 2 and built[0].name
    bases = {s.image for s in built if s.image not in {b.name for b in built}}
    # One base, Debian 12 slim by digest: the distribution (and Python 3.11) the tests run on.
    assert len(bases) == 1, bases
    (base,) = bases
    assert deploy._image_problem(base) is None, base
    assert re.fullmatch(r"debian:12\.\d+-slim@sha256:[0-9a-f]{64}", base), base
    final = built[-1]
    assert any(f"--from={built[0].name}" in c for c in final.all("COPY"))


def test_the_image_sets_what_the_nvidia_runtime_reads():
    env = " ".join(stages(DOCKERFILE)[-1].all("ENV"))
    assert "NVIDIA_VISIBLE_DEVICES=all" in env and "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in env


@pytest.mark.parametrize("path", ["Dockerfile", "docker/seaweedfs.Dockerfile", "docker/stack.Dockerfile"])
def test_final_stage_runs_as_a_numeric_non_root_user(path):
    final = stages((REPO / path).read_text())[-1]
    users = final.all("USER")
    assert users, f"{path}: final stage has no USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, users[-1]
    # Nothing after the last USER may switch back to root.
    assert final.instructions[-1][0] in ("CMD", "ENTRYPOINT", "WORKDIR", "USER", "LABEL", "EXPOSE")


def test_seaweedfs_compose_image_derives_from_the_cluster_image():
    (stage,) = stages((REPO / "docker/seaweedfs.Dockerfile").read_text())
    assert stage.image == "chrislusf/seaweedfs:4.00"


def test_no_secret_values_in_env_or_args():
    for op, args in instructions(DOCKERFILE):
        if op in ("ENV", "ARG"):
            for name, _, value in re.findall(r"(\w+)(=)?(\S*)", args):
                assert not (SECRET_NAME.search(name) and value), f"{op} {name} carries a value"
    assert not any(p.search(DOCKERFILE) for p in deploy._CREDENTIAL_TEXT)


def test_final_stage_installs_no_build_tools_and_nothing_editable():
    final = stages(DOCKERFILE)[-1]
    installs = " ".join(final.all("RUN"))
    assert "apt-get install" in installs
    for tool in BUILD_TOOLS:
        assert not re.search(rf"(?<![\w.-]){re.escape(tool)}(?![\w.-])", installs), tool
    assert not re.search(r"pip install[^&]*(-e|--editable)\b", DOCKERFILE)
    assert "rm -rf /var/lib/apt/lists/*" in installs


def test_torch_pins_match_pyproject():
    # The image installs torch from the hashed lock (tests/deploy/test_lock.py checks the rest).
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {d.split("==")[0]: d.split("==")[1] for d in deps if d.split("==")[0] in ("torch", "torchvision")}
    lock = (REPO / "docker" / "requirements.lock").read_text()
    for name, version in pins.items():
        assert re.search(rf"^{name}=={re.escape(version)} \\$", lock, re.M), name
    assert len(pins) == 2


@pytest.mark.parametrize(
    ("path", "excluded"),
    [
        (".env", True),
        (".git/config", True),
        (".venv/bin/python", True),
        ("runs/x/metrics.json", True),
        ("tests/test_x.py", True),
        ("fedcore/__pycache__/cli.cpython-312.pyc", True),
        ("pyproject.toml", False),
        ("README.md", False),
        ("fedcore/cli.py", False),
        ("components/run_stage.py", False),
        ("pipelines/sweep.py", False),
        ("docker/requirements.lock", False),
        ("docker/laptop.env", True),
    ],
)
def test_dockerignore_keeps_only_what_the_image_installs(path, excluded):
    assert ignored(path, (REPO / ".dockerignore").read_text()) is excluded


def copied_sources(dockerfile: str) -> list[str]:
    """Every build-context path a Dockerfile COPYs or ADDs, in any stage (not `--from=` stage copies)."""
    sources = []
    for stage in stages(dockerfile):
        for op, args in stage.instructions:
            words = args.split()
            if op in ("COPY", "ADD") and not any(w.startswith("--from=") for w in words):
                sources += [w for w in words[:-1] if not w.startswith("--")]
    return sources


def tracked(source: str) -> bool:
    """Whether a clean clone has `source`: a committed file, or a folder holding committed files."""
    out = subprocess.run(["git", "ls-files", "--", source.rstrip("/")], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, f"these tests read `git ls-files` and need a git checkout: {out.stderr}"
    return bool(out.stdout.strip())


def test_copied_sources_read_through_copy_and_add_in_every_stage():
    text = "FROM a AS b\nCOPY x y /d/\nFROM b\nADD --chown=1 z/ /e/\nCOPY --from=b /opt /opt\n"
    assert copied_sources(text) == ["x", "y", "z/"]


@pytest.mark.parametrize("path", ["Dockerfile", "docker/stack.Dockerfile"])
def test_every_copied_path_is_committed_and_survives_dockerignore(path):
    # Against `git ls-files`, not the working tree: a file that only `make image` writes (the old
    # docker/build-ca.pem) exists here after a container test ran, and is missing from a fresh clone,
    # where `docker build .` then fails.
    rules = (REPO / ".dockerignore").read_text()
    sources = copied_sources((REPO / path).read_text())
    assert sources
    for source in sources:
        assert tracked(source), f"{path} copies {source}, which a fresh clone does not have"
        assert not ignored(source.rstrip("/"), rules), source


def test_runtime_image_carries_fashion_mnist_by_default():
    # The configs/fmnist presets read the Debian/Ubuntu package's files; pods cannot download them.
    final = stages(DOCKERFILE)[-1]
    defaults = dict(a.partition("=")[::2] for a in final.all("ARG"))
    assert defaults.get("DATASET_PACKAGES") == "dataset-fashion-mnist"
    assert any("${DATASET_PACKAGES}" in r and "apt-get install" in r for r in final.all("RUN"))
