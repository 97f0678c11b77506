"""Piped CLI output keeps wide tables; an explicit COLUMNS still decides."""

from fedcore.cli.console import PIPED_WIDTH, make_console


def test_piped_console_is_wide(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    console = make_console()
    assert not console.is_terminal  # pytest captures stdout
    assert console.width == PIPED_WIDTH
    assert make_console(stderr=True).width == PIPED_WIDTH


def test_columns_env_wins(monkeypatch):
    monkeypatch.setenv("COLUMNS", "97")
    assert make_console().width == 97
