"""`train --sweep` below the CLI (every combination, named and passed as after `--`; bad input is one
line and exit 2) and what `runs --compare` takes from a run's metrics.json (numbers only)."""
from __future__ import annotations

from pathlib import Path

import pytest

from xeoncluster.commands.compare import chosen, scored
from xeoncluster.core.errors import ConfigError
from xeoncluster.job.sweep import MAX_RUNS, parse_axes, points, with_params
from xeoncluster.job.train_request import ScriptRequest, TaskRequest
from xeoncluster.runs.record import RunRecord


def test_every_combination_is_a_run_named_after_the_sweep() -> None:
    axes = parse_axes(("lr=1e-4,3e-4", "batch_size=4,8,16"))
    runs = points("grid", axes)
    assert [name for name, _ in runs] == [f"grid-{i}" for i in range(1, 7)]
    assert runs[0][1].params == {"lr": "1e-4", "batch_size": "4"}
    assert runs[5][1].params == {"lr": "3e-4", "batch_size": "16"}
    assert {p.sweep for _, p in runs} == {"grid"}


def test_values_go_where_the_user_put_them_or_at_the_end() -> None:
    task = TaskRequest(task="squad", trainer_args=("--max_steps", "60"))
    assert with_params(task, {"lr": "1e-3"}).trainer_args == ("--max_steps", "60", "--lr", "1e-3")
    script = ScriptRequest(script=Path("main.py"), trainer_args=("--learning-rate={lr}", "--out", "{output}"))
    assert with_params(script, {"lr": "5e-5"}).trainer_args == ("--learning-rate=5e-5", "--out", "{output}")


@pytest.mark.parametrize(("pairs", "why"), [
    (("lr",), "needs KEY=V1,V2"),
    (("lr=",), "empty or repeated value"),
    (("lr=1,,2",), "empty or repeated value"),
    (("lr=1,1",), "empty or repeated value"),
    (("lr=1", "lr=2"), "given twice"),
    (("1lr=1,2",), "needs KEY=V1,V2"),
    (("a b=1",), "needs KEY=V1,V2"),
    (("output=a,b",), "already means the run's output folder"),
    (("a=" + ",".join(map(str, range(MAX_RUNS + 1))),), f"more than {MAX_RUNS}"),
])
def test_a_bad_sweep_is_one_line_and_exit_2(pairs: tuple[str, ...], why: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_axes(pairs)
    assert why in raised.value.message and raised.value.exit_code == 2


def record(run: str, sweep: str = "") -> RunRecord:
    return RunRecord(run=run, cluster="c", task="squad", sweep=sweep)


def test_compare_takes_runs_or_whole_sweeps_and_refuses_unknown_names() -> None:
    records = [record("s-2", "s"), record("s-1", "s"), record("solo")]
    assert [r.run for r in chosen(records, ("s",), "c")] == ["s-2", "s-1"]
    assert [r.run for r in chosen(records, ("solo", "s-1"), "c")] == ["s-1", "solo"]
    assert chosen(records, (), "c") == records
    with pytest.raises(ConfigError) as raised:
        chosen(records, ("s", "nosuch"), "c")
    assert "no run or sweep 'nosuch' on cluster 'c'" in raised.value.message and raised.value.exit_code == 2


def test_compare_reads_only_numbers_from_metrics_written_on_the_cluster() -> None:
    metrics = {"exact_match": 50.0, "f1": "99; rm -rf /", "eval_loss": 1.5, "accuracy": True,
               "train_loss": float("nan"),
               "log_history": [{"step": 10, "eval_loss": 1.2}, {"step": 20, "eval_loss": "low"}, "junk",
                               {"step": 30, "eval_loss": 1.4}]}
    compared = scored(record("r"), metrics)
    assert compared.final == {"exact_match": 50.0, "eval_loss": 1.5}
    assert compared.best_eval_loss == 1.2 and compared.train_loss is None
    assert scored(record("r"), {"log_history": "not a list"}).best_eval_loss is None
