"""The lab imports the product, never the other way: no module of fedcore/ (nor the kfp components and
pipelines built on it) imports lab or names a path under lab/ in its code. A user's install has no
lab/, so either would break there; docstrings and comments may still cite a lab page."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("fedcore", "components", "pipelines")
# A string that is a path into lab/ ("lab", "lab/records/x.json", "./lab/...", an f-string's "/lab/..." part).
LAB_PATH = re.compile(r"^(\.?/)?lab(/|$)")
IMPORTERS = {"import_module", "__import__", "spec_from_file_location"}


def _is_lab(module: str | None) -> bool:
    return module is not None and (module == "lab" or module.startswith("lab."))


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants (module, class, function): prose, allowed to cite lab pages."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def lab_uses(source: str) -> list[str]:
    """'line N: what' for each import of lab and each string naming a path under lab/ in `source`."""
    tree = ast.parse(source)
    prose = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [f"line {node.lineno}: import {a.name}" for a in node.names if _is_lab(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_lab(node.module):
            out.append(f"line {node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in IMPORTERS:
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and _is_lab(arg.value):
                out.append(f"line {node.lineno}: imports '{arg.value}' by name")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
              and LAB_PATH.match(node.value)):
            out.append(f"line {node.lineno}: path '{node.value}'")
    return out


def product_modules() -> list[Path]:
    return sorted(p for pkg in PRODUCT for p in (ROOT / pkg).rglob("*.py"))


def test_the_check_sees_every_way_in_and_lets_prose_cite_lab():
    source = '''"""Reproduces lab/results/tuning.md."""
import lab
import lab.bench_record as br
from lab.refresh_texts import refresh_texts
import importlib
importlib.import_module("lab.claims_table")
RECORD = Path("lab/records/quickstart.json")
GRIDS = ROOT / "lab" / "grids"
page = f"{ROOT}/lab/results/{name}.md"
HELP = "grid YAML, e.g. lab/grids/quickstart.yaml"  # an example in prose, not a path the code reads
def f():
    """See lab/README.md."""
'''
    found = lab_uses(source)
    assert sorted(int(line.split(":")[0][5:]) for line in found) == [2, 3, 4, 6, 7, 8, 9], found


def test_the_product_has_modules_to_check():
    assert len(product_modules()) > 100 and (ROOT / "fedcore" / "bench" / "grid.py") in product_modules()


@pytest.mark.parametrize("pkg", PRODUCT)
def test_no_product_module_imports_lab_or_reads_a_lab_path(pkg):
    uses = {str(p.relative_to(ROOT)): u for p in product_modules() if p.parts[len(ROOT.parts)] == pkg
            for u in [lab_uses(p.read_text(encoding="utf-8"))] if u}
    assert uses == {}, f"the product must not depend on lab/ (lab/README.md): {uses}"
