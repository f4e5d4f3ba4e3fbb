"""pyproject.toml's floors keep out the releases with known holes: what a fresh install may resolve to."""
from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]


def requirement(name: str) -> Requirement:
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    [found] = [Requirement(line) for line in dependencies if Requirement(line).name == name]
    return found


def test_paramiko_s_floor_keeps_out_the_releases_open_to_terrapin() -> None:
    """Fabric 3.2 takes any paramiko from 2.4; those before 3.4 let a man in the middle drop the first
    messages of an SSH session's secure channel (Terrapin, CVE-2023-48795)."""
    allowed = requirement("paramiko").specifier
    assert not allowed.contains("3.3.1") and not allowed.contains("2.12.0")
    assert allowed.contains("3.4.0")
