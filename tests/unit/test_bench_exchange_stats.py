"""bench_train.py's reading of the exchange clock: buckets span from the last rank's launch to the last
rank's completion, a step's exchange time is the union of its buckets' spans, and warm-up steps are left out."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def measures(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_measures", REPO / "benchmarks" / "train_measures.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "train_measures", module)  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


def _rank(*steps: list[list[float]]) -> dict[str, object]:
    return {"steps": list(steps)}


def test_exchange_stats_line_up_the_ranks_and_leave_out_warmup(measures: ModuleType) -> None:
    warmup = [[0.0, 50.0, 1e6]]
    # Rank 1 launches each bucket later than rank 0: the spans start at rank 1's launches.
    rank0 = _rank(warmup, [[10.0, 10.5, 2e6], [10.2, 11.0, 2e6]])
    rank1 = _rank(warmup, [[10.1, 10.6, 2e6], [10.4, 11.1, 2e6]])
    stats = measures.exchange_stats([rank0, rank1], warmup=1)
    # spans [10.1, 10.6] and [10.4, 11.1]: union 1.0 s; the last launch 10.4, the last completion 11.1
    assert stats["gradient_mb_per_step"] == 4.0
    assert stats["exchange_seconds_per_step"] == 1.0
    assert stats["exposed_seconds_per_step"] == 0.7
    assert stats["exchange_mb_per_s"] == 4.0
    assert stats["buckets_per_step"] == 2
    assert measures.bucket_sizes([rank0, rank1]) == [2_000_000, 2_000_000]


def test_disjoint_buckets_add_up(measures: ModuleType) -> None:
    rank = _rank([[0.0, 1.0, 1e6], [2.0, 2.5, 1e6]])
    assert measures.exchange_stats([rank, rank], warmup=0)["exchange_seconds_per_step"] == 1.5
