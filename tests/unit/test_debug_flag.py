"""--debug is the group's option: a `--debug` after `--` belongs to the ranks and shows no traceback."""
from __future__ import annotations

from pathlib import Path

from tests.conftest import run_cli


def test_debug_after_the_double_dash_is_not_the_cli_s(tmp_path: Path) -> None:
    result = run_cli(["train", "squad", "--name", "nosuch", "--", "--debug"], tmp_path)
    assert result.code == 1
    assert result.err.strip() == ("error: cluster 'nosuch' is not up | hint: run `xeoncluster up --name nosuch` "
                                  "first")


def test_debug_before_the_command_shows_the_traceback(tmp_path: Path) -> None:
    result = run_cli(["--debug", "train", "squad", "--name", "nosuch"], tmp_path)
    assert result.code == 1
    assert "Traceback (most recent call last)" in result.err
