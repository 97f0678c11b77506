"""Property: whatever a config file or override holds, `fedcore config show` exits 0 with a valid
resolved config, or exits 2 with one line on stderr; never a traceback.

Mutations start from configs/quickstart.yaml: a key (known, misspelt, or inside a free-form
section) set to an arbitrary value, then maybe the YAML text itself damaged (duplicate keys,
anchors and aliases, tags, deep nesting, bytes that are not UTF-8, control characters,
truncation), plus arbitrary dotted overrides. FEDCORE_FUZZ_EXAMPLES raises the example count
(CI runs 60; `FEDCORE_FUZZ_EXAMPLES=500 pytest tests/test_config_fuzz.py` for a long run).
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fedcore.cli import main
from fedcore.config import ExperimentConfig
from fedcore.registries import config_from_dict, load_config

BASE = yaml.safe_load(Path("configs/quickstart.yaml").read_text())
EXAMPLES = int(os.environ.get("FEDCORE_FUZZ_EXAMPLES", "60"))


def _paths(node: object, prefix: str = "") -> list[str]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _paths(v, f"{prefix}{k}.")] + ([prefix[:-1]] if prefix else [])
    return [prefix[:-1]]


KEYS = sorted(set(_paths(ExperimentConfig().to_dict())) | {
    "train.stage_rounds.train", "train.stage_rounds.bogus", "data.params.bogus", "data.params.split_seed",
    "noise.phi", "method.params.mu", "method.params.warmup_rounds", "train.bogus", "bogus", "model.params.norm",
})
SPECIAL = ["2024-01-01", "2024-01-01 10:00:00", "1e23", "1.0e+23", "1e308", ".inf", "-.inf", ".nan", "yes", "off",
           "0x10", "0o17", "1_000", "~", "null", "true", "[]", "{}", "''", "fedprox", "dividemix", "mnist",
           "digits_mosaic", "cnn", "natural", "\x1b[31m", "\u202e", "a\tb", "é", "1:30"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.integers(-3, 12),
                    st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 1), st.text(max_size=12),
                    st.sampled_from(SPECIAL))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=6) | st.sampled_from(KEYS), inner, max_size=3), max_leaves=6)
SNIPPETS = [
    b"seed: 1\nseed: 2\n", b"x: &a [1, 2]\ny: *a\n", b"data: &d\n  params: *d\n", b"seed: !!binary aGk=\n",
    b"method:\n  params: !!set {a, b}\n", b"seed: !!python/object:os.system x\n", b"\tseed: 1\n", b"\xef\xbb\xbf",
    b"\xff\xfe", b"\x00", b"\xe9t\xe9\n", b"data:\n  params:\n    x: " + b"[" * 80 + b"]" * 80 + b"\n",
    b"--- 1\n--- 2\n", b"{", b"]", b": :", b"? [a]\n: 1\n", b"seed: 2024-01-01\n", b"<<: {seed: 3}\n",
]


def _set(data: dict, dotted: str, value: object) -> None:
    parts = dotted.split(".")
    node = data
    for p in parts[:-1]:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[parts[-1]] = value


@st.composite
def cases(draw) -> tuple[bytes, list[str]]:
    data = yaml.safe_load(yaml.safe_dump(BASE))
    for key, value in draw(st.lists(st.tuples(st.sampled_from(KEYS), VALUES), max_size=3)):
        _set(data, key, value)
    text = yaml.safe_dump(data, allow_unicode=True, sort_keys=False).encode()
    damage = draw(st.sampled_from(["none", "none", "snippet", "byte", "truncate"]))
    if damage == "snippet":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(SNIPPETS)) + text[at:]
    elif damage == "byte":
        at = draw(st.integers(0, len(text) - 1))
        text = text[:at] + bytes([draw(st.integers(0, 255))]) + text[at + 1:]
    elif damage == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    overrides = [f"{k}={v}" for k, v in draw(st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(SPECIAL)
                                                                  | st.text(max_size=8)), max_size=2))]
    return text, overrides


def show(path: Path, overrides: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    argv = ["config", "show", str(path), *[x for o in overrides for x in ("--set", o)]]
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_every_mutation_is_a_valid_config_or_one_line_exit_2(case):
    text, overrides = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.yaml"
        path.write_bytes(text)
        code, out, err = show(path, overrides)
        # Grouped by the error's opening words, with the temp file's name left out.
        event(f"exit {code}" + (f": {' '.join(err.replace(str(path), '<file>').split()[1:4])}" if code else ""))
        if code == 0:
            cfg = load_config(path, overrides)
            assert f"# config_hash: {cfg.config_hash()}" in out
            assert config_from_dict(yaml.safe_load(cfg.to_yaml())) == cfg  # the resolved config is itself valid
        else:
            lines = err.strip().splitlines()
            assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
            assert "Traceback" not in err and all(c.isprintable() for c in lines[0]), err
