from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"  # small real MRPC and SQuAD v2 samples, shipped with the tests


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(args: list[str], home: Path, cwd: Path | None = None, timeout: float = 900,
            env_extra: dict[str, str] | None = None) -> CliResult:
    """Run the real console entry point in a subprocess, as a user would."""
    import os

    env = {**os.environ, "XEONCLUSTER_HOME": str(home), **(env_extra or {})}
    proc = subprocess.run([sys.executable, "-m", "xeoncluster.cli", *args], capture_output=True, text=True,
                          cwd=cwd or home, env=env, timeout=timeout)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def xc_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "xchome"
    home.mkdir()
    monkeypatch.setenv("XEONCLUSTER_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    return home
