"""The EC2 stand-in is a package of its own: it runs from any directory, and it reaches the CLI only
through AWS_ENDPOINT_URL (no imports either way)."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def imported_modules(folder: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in folder.rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        names |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
                  and node.level == 0}
        found[str(path.relative_to(REPO))] = names
    return found


def test_the_standin_and_the_cli_do_not_import_each_other() -> None:
    standin = REPO / "xeoncluster" / "standin"
    for path, names in imported_modules(standin).items():
        ours = [n for n in names if n.split(".")[0] in {"xeoncluster", "tests"}]
        assert all(n.startswith("xeoncluster.standin") for n in ours), path
    for path, names in imported_modules(REPO / "xeoncluster").items():
        if not path.startswith("xeoncluster/standin/"):
            assert not any(n.startswith("xeoncluster.standin") for n in names), path


def test_python_m_standin_runs_from_any_directory_without_pythonpath(tmp_path: Path) -> None:
    (tmp_path / "xeoncluster").mkdir()  # a folder of that name in the cwd must not shadow the package
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    wrapper = str(REPO / "scripts" / "aws-standin.sh")
    for argv in ([sys.executable, "-P", "-m", "xeoncluster.standin", "--help"], [wrapper, "--help"]):
        result = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert "EC2 stand-in" in result.stdout


def test_the_standin_mirror_serves_exactly_the_stock_stack() -> None:
    """Its nodes install the stock stack from the stand-in's mirror: a pin added to stacks.yaml and not
    here fails every `up` on the stand-in (tensorboardX did, in CI)."""
    from xeoncluster.core.stacks import get_stack
    from xeoncluster.standin.repos import PIP_PACKAGES

    assert sorted(PIP_PACKAGES) == sorted(get_stack("stock").packages)
