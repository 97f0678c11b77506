"""run_local hands the root logger and `print` back as it found them, whatever kfp.local's task threads left.

kfp.local's local_logger_context swaps the root logger's handlers per task with no lock; loop
iterations run on threads, so overlapping tasks can leave one task's handler installed. Before
the fix, that handler (bound to the run's log sink, closed after the run) turned every later log
record of the process into "--- Logging error ---", and tests after a sweep lost their output.
kfp.local's indented_print swaps builtins.print the same way: a leftover wrapper wrote four spaces
to stdout before every later print, so tests that parse printed tables lost rows in the full suite.
"""

import builtins
import logging
import sys

from kfp.local import logging_utils
from kfp.pipeline_spec import pipeline_spec_pb2

from pipelines import runner


def _overlapping(context) -> None:
    """Two kfp task contexts that overlap as two threads' would: A enters, B enters, A leaves, B leaves."""
    a, b = context(), context()
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)
    b.__exit__(None, None, None)


def test_overlapping_kfp_task_contexts_leave_a_handler_behind():
    # The race itself, so the test below guards something real.
    root = logging.getLogger()
    before = root.handlers[:]
    try:
        _overlapping(logging_utils.local_logger_context)
        leftover = [h for h in root.handlers if h not in before]
        assert len(leftover) == 1 and isinstance(leftover[0], logging.StreamHandler)
    finally:
        root.handlers[:] = before


class _FakePipeline:
    """Stands in for a compiled pipeline whose parallel tasks raced on the root logger."""

    pipeline_spec = pipeline_spec_pb2.PipelineSpec()

    def __call__(self):
        _overlapping(logging_utils.local_logger_context)
        logging.getLogger("fedcore.test").warning("inside the run")
        return None


def test_run_local_restores_the_root_logger_and_later_records_log_cleanly(tmp_path, capsys):
    root = logging.getLogger()
    before, level = root.handlers[:], root.level
    runner.run_local(_FakePipeline(), tmp_path, echo=False)
    assert root.handlers == before and root.level == level
    logging.getLogger("fedcore.test").error("after the run")
    err = capsys.readouterr().err
    assert "Logging error" not in err
    # What the run logged went to its own log file, through the sink.
    assert "inside the run" in (tmp_path / "kfp-local.log").read_text()


def test_overlapping_kfp_print_indents_leave_an_indenting_print_behind(capsys):
    # The race itself: afterwards every print, even one to stderr, writes four spaces to stdout first.
    original = builtins.print
    try:
        _overlapping(logging_utils.indented_print)
        assert builtins.print is not original
        print("| row |", file=sys.stderr)
        assert capsys.readouterr().out == "    "
    finally:
        builtins.print = original


class _FakeIndentingPipeline(_FakePipeline):
    def __call__(self):
        _overlapping(logging_utils.indented_print)
        return None


def test_run_local_restores_print_and_later_output_is_not_indented(tmp_path, capsys):
    original = builtins.print
    try:
        runner.run_local(_FakeIndentingPipeline(), tmp_path, echo=False)
        assert builtins.print is original
        print("| fedavg (1) | 84.9 |")
        assert capsys.readouterr().out == "| fedavg (1) | 84.9 |\n"
    finally:
        builtins.print = original


class _StoppedPipeline:
    """A pipeline run that Ctrl-C stops mid-way."""

    pipeline_spec = pipeline_spec_pb2.PipelineSpec()

    def __call__(self):
        raise KeyboardInterrupt


def test_a_stopped_local_run_says_what_is_kept_and_that_it_starts_over(tmp_path):
    # Issue 71: every interrupt says what was kept and how to go on.
    import pytest

    from fedcore.errors import Interrupted

    with pytest.raises(Interrupted) as err:
        runner.run_local(_StoppedPipeline(), tmp_path, echo=False)
    assert err.value.code == 130 and str(err.value).startswith("interrupted (Ctrl-C) before the pipeline finished")
    assert str(tmp_path / "kfp") in str(err.value) and "runs the pipeline from its start" in str(err.value)
