"""Names that become paths (a run's folder, an image's folder) are validated before anything is touched."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize("run", ["../../../tmp/x", "a/b", "..", ".hidden", ""])
def test_run_names_that_are_paths_are_refused(tmp_path: Path, run: str) -> None:
    outside = tmp_path / "x"
    for args in (["--dry-run", "--nodes", "2", "--instance-type", "c7i.2xlarge"], []):
        result = run_cli(["train", "squad", "--demo", "--name", "c1", "--run", run, *args], tmp_path / "home",
                         cwd=tmp_path)
        assert result.code == 2, result.out + result.err
        assert result.err.startswith("error: --run") and len(result.err.strip().splitlines()) == 1
    assert not outside.exists() and not (tmp_path / "home").exists()


def test_images_rm_of_a_path_is_refused_and_removes_nothing(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "image.json").write_text(json.dumps({"id": "x", "key": "k", "name": "n"}))
    root = tmp_path / "a" / "b"
    (root / "images").mkdir(parents=True)
    config = tmp_path / "cluster.yaml"
    config.write_text(f"provider: local\nlocal:\n  root: {root}\n")
    for image_id in ("../../../victim", "../x", "local-zz"):
        result = run_cli(["--config", str(config), "images", "rm", image_id], tmp_path / "home", cwd=tmp_path)
        assert result.code == 2, result.out + result.err
        assert "not an image id" in result.err and len(result.err.strip().splitlines()) == 1
    assert (victim / "image.json").exists()
