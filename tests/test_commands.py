"""What every command shares: writing a report file is one line and exit 2 when it fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from spotproof.commands import EXIT_BAD_INPUT, written


def test_a_report_that_cannot_be_written_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    target = tmp_path / "file" / "report.json"  # a folder that is a file

    with pytest.raises(SystemExit) as exited:
        written("drill", target, lambda: target.write_text("{}"))

    assert exited.value.code == EXIT_BAD_INPUT
    assert capsys.readouterr().err == (
        f"spotproof drill: cannot write {target}: {tmp_path / 'file'} is a file, not a folder\n"
    )


def test_a_report_is_written_into_a_folder_made_for_it(tmp_path: Path) -> None:
    target = tmp_path / "out" / "deeper" / "report.json"

    written("smoke", target, lambda: target.write_text("{}"))

    assert target.read_text() == "{}"
