"""sparktui's own log: failures it survives are logged with their traceback; one line shown."""

from __future__ import annotations

import logging

from sparktui import cli, logfile


def _boom(args):
    raise ZeroDivisionError("division by zero")


def test_internal_error_is_one_line_and_its_traceback_is_in_the_log(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    import sparktui.commands.diagnose as diagnose

    monkeypatch.setattr(diagnose, "run", _boom)
    assert cli.main(["diagnose", "some.log"]) == 1
    err = capsys.readouterr().err
    log = tmp_path / "sparktui" / "sparktui.log"
    assert err == (
        f"sparktui: internal error: ZeroDivisionError: division by zero (details in {log})\n"
    )
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "_boom" in text


def test_debug_also_logs_to_stderr(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    logfile.setup(debug=True, stderr=True)
    try:
        logging.getLogger("sparktui.core.monitor").debug("probing %s", "spark-2")
        assert "probing spark-2" in capsys.readouterr().err
        assert "probing spark-2" in (tmp_path / "sparktui" / "sparktui.log").read_text()
    finally:
        logfile.setup()


def test_unwritable_state_dir_still_runs(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))
    assert logfile.setup() is None
    logging.getLogger("sparktui").warning("no file: dropped quietly")
