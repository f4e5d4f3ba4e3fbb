"""Where the project's own files (playbooks, stacks, the training package) live on disk."""
from __future__ import annotations

from pathlib import Path

from .errors import XeonClusterError


def project_root() -> Path:
    root = Path(__file__).resolve().parent.parent
    if not (root / "playbooks").is_dir():
        raise XeonClusterError(f"cannot find playbooks/ next to {root}",
                               hint="install xeoncluster from a checkout with `pip install -e .`")
    return root


def project_file(*parts: str) -> Path:
    return project_root().joinpath(*parts)
