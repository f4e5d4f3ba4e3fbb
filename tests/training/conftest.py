"""One set of demo assets shared by the tests that train."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from xeoncluster.node.tasks.demo_assets import ensure_demo_assets

    root = tmp_path_factory.mktemp("demo") / "assets"
    ensure_demo_assets(root, seed=0)
    return root
