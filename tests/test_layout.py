"""The package's layout rules (docs/dev/layout.md): no import cycles, imports point down, a small root.

Imports are read statically with scripts/import_cycles.py, counting function-level and
TYPE_CHECKING-only imports as well.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FEDCORE = REPO / "fedcore"
SCRIPT = REPO / "scripts" / "import_cycles.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("import_cycles", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ic = _load_script()

# What each low layer may import (see docs/dev/layout.md). Third-party packages by top-level
# name; fedcore modules by dotted prefix. The standard library is always allowed.
STATS_EXTERNAL = {"numpy", "scipy", "torch", "sklearn"}
STATS_FEDCORE = ("fedcore.stats", "fedcore.errors")
ENGINE_EXTERNAL = {"numpy", "torch"}
ENGINE_FEDCORE = ("fedcore.engine", "fedcore.stats", "fedcore.errors", "fedcore.config", "fedcore.io")


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def layer_violations(pkg_dir: Path, layer: str, external: set[str], internal: tuple[str, ...]) -> list[str]:
    """'module -> import' for every import of a module under `layer` that the rule does not allow."""
    files = ic.module_names(pkg_dir)
    known = set(files)
    root = pkg_dir.name
    found = []
    for name, path in sorted(files.items()):
        if not _under(name, (layer,)):
            continue
        is_pkg = path.name == "__init__.py"
        for stmt in ic.imports(ast.parse(path.read_text(encoding="utf-8")), runtime_only=False):
            base = ic.absolute(name, is_pkg, stmt[0], stmt[1])
            top = base.split(".")[0]
            if top == root:
                found += [f"{name} -> {t}" for t in sorted(ic.targets(name, is_pkg, stmt, known))
                          if not _under(t, internal)]
            elif top not in external and top not in sys.stdlib_module_names:
                found.append(f"{name} -> {base}")
    return found


def test_no_import_cycle_among_the_library_modules():
    proc = subprocess.run([sys.executable, str(SCRIPT), str(FEDCORE), str(REPO / "components"),
                           str(REPO / "pipelines")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith(" 0 cycle(s)")


def test_cycle_script_finds_function_level_and_type_checking_cycles(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import a\n")
    (pkg / "c.py").write_text("import pkg.a\n")

    strict = subprocess.run([sys.executable, str(SCRIPT), str(pkg)], capture_output=True, text=True)
    runtime = subprocess.run([sys.executable, str(SCRIPT), "--runtime-only", str(pkg)], capture_output=True,
                             text=True)

    assert strict.returncode == 1
    assert "cycle among 2 modules: pkg.a -> pkg.sub.b -> pkg.a" in strict.stdout
    assert "members: pkg.a, pkg.sub.b" in strict.stdout  # c imports into the cycle but is not part of it
    assert runtime.returncode == 0 and runtime.stdout.strip().endswith(" 0 cycle(s)")


def test_an_import_runs_the_parent_packages_unless_the_importer_is_inside_them():
    known = {"p", "p.q", "p.q.r", "p.s"}
    assert ic.targets("p.s", False, (0, "p.q.r", []), known) == {"p.q", "p.q.r"}
    # Named explicitly, the own package counts: `from . import x` reads p/q/__init__.py.
    assert ic.targets("p.q.r", False, (1, "", ["x"]), known) == {"p.q"}
    assert ic.targets("p.q.r", False, (1, "", ["s"]), known) == {"p.q"}  # p.q.s is no module: a name
    assert ic.targets("p.s", False, (0, "p.q", ["r", "name"]), known) == {"p.q", "p.q.r"}


def test_stats_imports_only_maths_libraries_and_errors():
    assert layer_violations(FEDCORE, "fedcore.stats", STATS_EXTERNAL, STATS_FEDCORE) == []


def test_engine_imports_nothing_above_it():
    assert layer_violations(FEDCORE, "fedcore.engine", ENGINE_EXTERNAL, ENGINE_FEDCORE) == []


def test_layer_check_flags_an_upward_import(tmp_path):
    pkg = tmp_path / "fedcore"
    (pkg / "stats").mkdir(parents=True)
    (pkg / "methods").mkdir()
    for init in (pkg, pkg / "stats", pkg / "methods"):
        (init / "__init__.py").write_text("")
    (pkg / "methods" / "m.py").write_text("")
    (pkg / "stats" / "s.py").write_text("import numpy\nimport mlflow\n\ndef f():\n    from fedcore.methods import m\n")

    assert layer_violations(pkg, "fedcore.stats", STATS_EXTERNAL, STATS_FEDCORE) == [
        "fedcore.stats.s -> mlflow", "fedcore.stats.s -> fedcore.methods", "fedcore.stats.s -> fedcore.methods.m"]


@pytest.mark.parametrize("layer", ["components", "pipelines", "fedcore.cli"])
def test_only_the_cli_reaches_up_to_the_pipeline_layers(layer):
    graph = ic.build_graph([FEDCORE, REPO / "components", REPO / "pipelines"])
    importers = {m for m, deps in graph.items() if m.startswith("fedcore.") and any(_under(d, (layer,)) for d in deps)}
    assert {m for m in importers if not _under(m, ("fedcore.cli",))} <= {"fedcore.__main__"}


def test_package_root_holds_at_most_eight_modules():
    assert len(sorted(FEDCORE.glob("*.py"))) <= 8


def test_layout_docs_name_every_folder_and_root_module():
    layout = (REPO / "docs" / "dev" / "layout.md").read_text()
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Layout"):]
    for path in sorted(FEDCORE.iterdir()):
        if path.is_dir() and (path / "__init__.py").is_file() or path.suffix == ".py":
            name = f"{path.name}/" if path.is_dir() else path.name
            assert name in layout, f"docs/dev/layout.md does not describe fedcore/{name}"
            assert name in section, f"README's layout section does not mention fedcore/{name}"
