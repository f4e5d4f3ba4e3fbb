"""Issue 24, finding 6, from the CLI: `storage rm RUN` on folder storage (local provider, no nodes needed)
takes only a run name that names a run the cluster keeps, exactly. A path (`../..`, `/`), a prefix of a
run or a name with a trailing newline is bad input: exit 2, one line, nothing deleted."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli

RUNS = {"xs": ("r1", "r10", "r2"), "other": ("r1",)}


def stored(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home / "storage")) for p in (home / "storage").rglob("*") if p.is_file())


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    for cluster, runs in RUNS.items():
        for run in runs:
            folder = home / "storage" / cluster / "runs" / run
            (folder / "results").mkdir(parents=True)
            (folder / "run.json").write_text(f'{{"run": "{run}", "cluster": "{cluster}", "task": "squad"}}')
            (folder / "results" / "metrics.json").write_text("{}")
    return home


def rm(home: Path, run: str):
    return run_cli(["storage", "rm", run, "--provider", "local", "--name", "xs"], home, timeout=120)


@pytest.mark.parametrize("run", ["../..", "/", "..", "r1/..", "r1\n", "", "r", "r1/"])
def test_storage_rm_of_anything_but_a_stored_run_is_bad_input_and_deletes_nothing(home: Path, run: str) -> None:
    before = stored(home)
    result = rm(home, run)
    assert result.code == 2, (result.out, result.err)
    assert len(result.err.strip().splitlines()) == 1 and result.err.startswith("error: "), result.err
    assert stored(home) == before


def test_storage_rm_of_a_stored_run_removes_that_run_only(home: Path) -> None:
    result = rm(home, "r1")
    assert result.code == 0, result.err
    assert "removed run r1 of cluster 'xs' from storage (2 objects)" in result.out
    assert stored(home) == ["other/runs/r1/results/metrics.json", "other/runs/r1/run.json",
                            "xs/runs/r10/results/metrics.json", "xs/runs/r10/run.json",
                            "xs/runs/r2/results/metrics.json", "xs/runs/r2/run.json"]
