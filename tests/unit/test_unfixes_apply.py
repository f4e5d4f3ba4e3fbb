"""Each stand-in proof patch (tests/standin/unfixes/) still applies to the code as it is: a refactor that
moves the lines a patch takes out would otherwise leave `python -m tests.standin.unfixed` proving nothing."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PATCHES = sorted((REPO / "tests" / "standin" / "unfixes").glob("*.patch"))


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs a git checkout")
@pytest.mark.parametrize("patch", PATCHES, ids=[p.stem for p in PATCHES])
def test_the_patch_applies(patch: Path) -> None:
    checked = subprocess.run(["git", "apply", "--check", str(patch)], cwd=REPO, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
