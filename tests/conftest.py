from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Where the environment forbids bytecode files (CI's does), every CLI call and every agent the tests start
# compiled the whole package from its source again: a fifth of a CLI call's CPU, on a machine that CI keeps
# CPU-bound. The tests' subprocesses write and reuse them.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# Tests that boot machines run one after another on one pytest-xdist worker, in file order (the modules
# share clusters): the local nodes (namespaces with their sshd, and the tests that look at the machine's
# namespaces) in one group, the EC2 stand-in (its own namespace and containers) in another, so that the
# two chains run at once on two of the three workers; the rest (unit, moto, kube, training on loopback) run
# on the third, beside them.
# tests/standin_unit/ holds the stand-in's own tests that boot nothing: outside tests/standin/ they stay
# off its chain and run with the rest.
MACHINE_GROUPS = {"tests/e2e/": "local-nodes", "tests/standin/": "standin"}
DATA = REPO / "tests" / "data"  # small real MRPC and SQuAD v2 samples, shipped with the tests


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(args: list[str], home: Path, cwd: Path | None = None, timeout: float = 900,
            env_extra: dict[str, str] | None = None) -> CliResult:
    """Run the real console entry point in a subprocess, as a user would."""
    env = {**os.environ, "XEONCLUSTER_HOME": str(home), **(env_extra or {})}
    proc = subprocess.run([sys.executable, "-m", "xeoncluster.cli", *args], capture_output=True, text=True,
                          cwd=cwd or home, env=env, timeout=timeout)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def interruptible() -> None:
    """preexec_fn of a process a test will SIGINT, as Ctrl-C would. Tests started in the background by a
    shell without job control (`bash -c '... &'`) inherit SIGINT ignored, an ignored signal stays ignored
    across exec, and Python then installs no KeyboardInterrupt: the SIGINT would go unheard."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


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
        group = next((g for prefix, g in MACHINE_GROUPS.items() if where.startswith(prefix)), None)
        if group is None and item.get_closest_marker("machine_wide"):
            group = "local-nodes"
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Warm rank servers (xeoncluster/node/warm_start) that the tests' ranks started wait for more ranks for
    minutes, shared by the workers: once every worker is done, the session leaves none behind (a cluster's go
    with its nodes)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    from xeoncluster.node.warm_start.server import running

    for server in running():  # on this machine's own network: the tests' (PYTEST_VERSION), not a cluster node's
        if any(line.startswith(b"PYTEST_VERSION=") for line in server.environ):
            with contextlib.suppress(ProcessLookupError):
                os.kill(server.pid, signal.SIGKILL)
