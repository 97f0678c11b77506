"""The commands the README and its guides show still work: every `fedcore ...` line parses with the
real CLI (commands, options, arguments), the configs and scripts it names exist, `make` targets are
in the Makefile, and the cheap read-only ones (`fedcore config ...`) run and exit 0.

docs/deploy.md has more checks of its own (tests/deploy/test_docs.py).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer.main

from fedcore.cli import _click_error_types, app, main

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/usage.md", "docs/configuration.md", "docs/reliability.md", "docs/deploy.md",
         "docs/bench.md", "lab/results/tuning.md", "docs/federation.md", "docs/pipelines.md", "lab/README.md")
FENCE = re.compile(r"```(?:bash|sh)\n(.*?)```", re.S)
INLINE = re.compile(r"`((?:fedcore|make|python) [^`]+)`")
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z_]{2,}\b|\.\.\.")  # CONFIG, RUN_DIR, NAME, "..."


def commands(page: str, inline: bool = True) -> list[str]:
    """Every shell command of a page: code-block lines (continuations joined, comments dropped, pipes
    and `&&` split), then, with `inline`, the `fedcore ...` / `make ...` spans of its prose."""
    text = (ROOT / page).read_text(encoding="utf-8")
    lines = [line for block in FENCE.findall(text) for line in re.sub(r"\\\n\s*", " ", block).splitlines()]
    out = []
    for line in lines + (INLINE.findall(text) if inline else []):
        for part in re.split(r"\s(?:\||&&|;)\s", line):
            if not part.strip().startswith(("fedcore", "make", "python")):
                continue  # other tools' lines (kubectl, heredocs, ...) are not ours to parse
            words = shlex.split(part, comments=True)
            if words:
                out.append(shlex.join(words))
    return out


def shown(prefix: str, inline: bool = True) -> list[tuple[str, str]]:
    return [(page, cmd) for page in PAGES for cmd in dict.fromkeys(commands(page, inline)) if cmd.startswith(prefix)]


def resolve(words: list[str]):
    """The click command a `fedcore` argv names, its name, and the argv left for it."""
    cmd, name = typer.main.get_command(app), "fedcore"
    while hasattr(cmd, "commands") and words and words[0] in cmd.commands:
        name, cmd, words = words[0], cmd.commands[words[0]], words[1:]
    assert not hasattr(cmd, "commands"), f"'{name}' needs one of {sorted(cmd.commands)}, got {words}"
    return name, cmd, words


def test_the_readme_opens_with_the_two_commands_and_its_usage_with_fedcore_run():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert commands("README.md", inline=False)[:2] == ["make run", "make test"]
    usage = readme[readme.index("## Usage"):]
    assert "```bash\nfedcore run " in usage
    assert all(commands(page, inline=False) for page in PAGES[:2])


@pytest.mark.parametrize("page, cmd", shown("fedcore ", inline=False))
def test_a_shown_fedcore_command_line_parses_and_its_files_exist(page, cmd):
    name, command, rest = resolve(shlex.split(cmd)[1:])
    usage, _ = _click_error_types()
    if not PLACEHOLDER.search(cmd):
        try:
            command.make_context(name, list(rest))
        except usage as err:
            pytest.fail(f"{page}: `{cmd}`: {err.format_message()}")
    for word in rest:
        if word.startswith(("configs/", "docs/", "lab/")) and not PLACEHOLDER.search(word):
            assert (ROOT / word).exists(), f"{page}: `{cmd}` names {word}, which does not exist"


@pytest.mark.parametrize("page, cmd", [(p, c) for p, c in shown("fedcore ") if (p, c) not in shown("fedcore ", False)])
def test_a_fedcore_command_named_in_prose_exists_with_its_options(page, cmd):
    _, command, rest = resolve(shlex.split(cmd)[1:])
    options = {o for param in command.params for o in getattr(param, "opts", [])}
    for word in rest:
        if word.startswith("-"):
            assert word.split("=")[0] in options, f"{page}: `{cmd}`: no option {word}"


@pytest.mark.parametrize("page, cmd", shown("make "))
def test_a_shown_make_target_exists(page, cmd):
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in shlex.split(cmd)[1:]:
        if "=" not in target:
            assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"{page}: no make target '{target}'"


@pytest.mark.parametrize("page, cmd", shown("python ") + shown(".venv/bin/python "))
def test_a_shown_script_exists(page, cmd):
    import importlib.util

    words = shlex.split(cmd)
    if words[1] == "-m":
        assert importlib.util.find_spec(words[2]), f"{page}: `{cmd}`: no module {words[2]}"
    else:
        assert (ROOT / words[1]).is_file(), f"{page}: `{cmd}`: no {words[1]}"


@pytest.mark.parametrize("page, cmd", [(p, c) for p, c in shown("fedcore config ", False) if not PLACEHOLDER.search(c)])
def test_a_shown_config_command_runs(page, cmd, capsys):
    main(shlex.split(cmd)[1:])  # exits non-zero (SystemExit) on any error
    assert capsys.readouterr().out.strip(), f"{page}: `{cmd}` printed nothing"
