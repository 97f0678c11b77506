"""`fedcore tune` stopped by Ctrl-C or SIGTERM says what it kept and how to go on (issue 71), as
`fedcore run` and `fedcore bench` do, in one line with exit code 130 or 143."""

from __future__ import annotations

import pytest

from fedcore import cli
from fedcore.errors import Terminated


@pytest.mark.parametrize(("stop", "code", "start"), [(KeyboardInterrupt, 130, "interrupted (Ctrl-C)"),
                                                     (Terminated, 143, "terminated (SIGTERM)")])
def test_a_stopped_tune_says_how_many_trials_it_kept_and_how_to_go_on(tmp_path, capsys, monkeypatch, stop, code,
                                                                       start):
    out = tmp_path / "tune"

    def run_tune(req, say):  # two trials finished, the third stopped mid-run
        for n in ("0000", "0001"):
            (out / "trials" / n).mkdir(parents=True)
            (out / "trials" / n / "metrics.json").write_text("{}")
        (out / "trials" / "0002").mkdir()
        raise stop("stopped")

    monkeypatch.setattr("fedcore.tuning.study.run_tune", run_tune)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["tune", "configs/quickstart.yaml", "--out", str(out), "--trials", "4"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == code and "\n" not in err
    assert err.startswith(f"{start} before the tune finished; 2 finished trial(s) are kept in '{out}'")
    assert "the same command goes on from them" in err
