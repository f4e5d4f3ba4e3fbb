"""Every repository path README.md and docs/*.md name exists: a file moved or removed fails here, not in a
reader's browser. Link targets are relative to the document; backticked paths to the repository root."""
from __future__ import annotations

import glob
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

FENCED = re.compile(r"```.*?```", re.DOTALL)
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`]+)`")
# What a backticked word must look like to be taken for a repository path (not a command, a key or a node path).
REPO_PATH = re.compile(r"(xeoncluster|tests|scripts|benchmarks|docs|examples|\.ci)/\S*|README\.md|cluster\.yaml")


def named_paths(document: Path) -> Iterator[tuple[str, Path]]:
    """(as written, where it points) for each link target and backticked repository path in `document`."""
    text = FENCED.sub("", document.read_text())
    for target in LINK.findall(text):
        path = target.split("#")[0]
        if path and not target.startswith(("http://", "https://", "mailto:")):
            yield target, document.parent / path
    for words in (code.split() for code in CODE.findall(text)):
        if words and REPO_PATH.fullmatch(words[0]):
            yield words[0], REPO / words[0]


def exists(path: Path) -> bool:
    """A glob (`xeoncluster/playbooks/*.yaml`) exists when it matches something."""
    return bool(glob.glob(str(path))) if any(c in str(path) for c in "*?[") else path.exists()


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: str(d.relative_to(REPO)))
def test_every_named_path_exists(document: Path) -> None:
    missing = sorted({written for written, path in named_paths(document) if not exists(path)})
    assert not missing, f"{document.relative_to(REPO)} names paths that do not exist: {', '.join(missing)}"


def test_a_missing_path_is_found(tmp_path: Path) -> None:
    document = tmp_path / "doc.md"
    document.write_text("[gone](../nowhere.py), `xeoncluster/nowhere.py`, `xeoncluster/playbooks/*.yaml`\n")
    found = {written: exists(path) for written, path in named_paths(document)}
    assert found == {"../nowhere.py": False, "xeoncluster/nowhere.py": False, "xeoncluster/playbooks/*.yaml": True}
