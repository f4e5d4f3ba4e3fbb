"""`xeoncluster --version` prints the version, and `python -m xeoncluster` is the console script."""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from xeoncluster.cli import main

REPO = Path(__file__).resolve().parents[2]


def run_module(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_version_prints_the_projects_version(capsys: pytest.CaptureFixture[str]) -> None:
    expected = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"xeoncluster {expected}\n"


def test_python_dash_m_xeoncluster_is_the_console_script() -> None:
    as_package = run_module("xeoncluster", "--help")
    as_cli = run_module("xeoncluster.cli", "--help")
    assert as_package.returncode == 0, as_package.stderr
    assert as_package.stdout == as_cli.stdout
    assert as_package.stdout.startswith("Usage: xeoncluster ")
    version = run_module("xeoncluster", "--version")
    assert (version.returncode, version.stdout.split()[0]) == (0, "xeoncluster")
