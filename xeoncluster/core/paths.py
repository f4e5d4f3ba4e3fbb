"""Where the project's own files (playbooks, stacks, the node package) live on disk: all inside the
installed `xeoncluster` package, so a wheel carries them as a checkout does."""
from __future__ import annotations

from pathlib import Path

from xeoncluster.core.errors import XeonClusterError

PACKAGE = "xeoncluster"
# What the master's agent needs of the package; the stand-in is only for this machine's tests.
NOT_ON_THE_MASTER = ("standin",)


def package_dir() -> Path:
    root = Path(__file__).resolve().parents[1]
    if not (root / "playbooks").is_dir():
        raise XeonClusterError(f"cannot find playbooks/ in {root}",
                               hint="reinstall xeoncluster (`pip install -e .` from a checkout)")
    return root


def project_file(*parts: str) -> Path:
    return package_dir().joinpath(*parts)


def source_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix not in (".pyc", ".pyo"))


def node_files() -> list[Path]:
    """The package as the ranks import it: its (empty) top and `xeoncluster.node`."""
    root = package_dir()
    return [root / "__init__.py", *source_files(root / "node")]


def master_files() -> list[Path]:
    root = package_dir()
    return [p for p in source_files(root) if p.relative_to(root).parts[0] not in NOT_ON_THE_MASTER]
