from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Tests that boot machines (namespace nodes with their sshd, the EC2 stand-in's containers), or look at the
# machine-wide state those change, run one after another on one pytest-xdist worker, in file order (the
# modules share clusters); the rest (unit, moto, kube, training on loopback) run on the other worker
# meanwhile, on the core those mostly leave idle.
MACHINE_WIDE = ("tests/e2e/", "tests/standin/")
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


@pytest.hookimpl(tryfirst=True)  # before xdist turns the group into the test's scope
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.relative_to(REPO).as_posix()
        if where.startswith(MACHINE_WIDE) or item.get_closest_marker("machine_wide"):
            item.add_marker(pytest.mark.xdist_group("machine"))
