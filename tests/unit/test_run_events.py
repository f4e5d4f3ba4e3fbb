"""The typed events between the ranks and the agent, and what `train` hands the agent."""
from __future__ import annotations

import json
from pathlib import Path

from xeoncluster.core.stacks import get_stack
from xeoncluster.job.train_plan import build_plan
from xeoncluster.job.train_request import TaskRequest
from xeoncluster.node.events.events import MARKER, RunEvent, parse_line, read_events
from xeoncluster.providers.base import Node
from xeoncluster.runs.submission import Submission
from xeoncluster.topology import CpuTopology


def test_events_travel_as_marked_lines_with_or_without_the_rank_label() -> None:
    event = RunEvent("notice", rank=3, node="10.0.0.7", reason="spot interruption notice", deadline=1795514520.0)
    line = MARKER + event.to_json()
    assert parse_line(line) == event
    relabelled = parse_line(f"[5] {line}")
    assert relabelled is not None and relabelled.rank == 5 and relabelled.reason == event.reason
    assert parse_line("[0] step 3/10  loss 1.2") is None
    assert parse_line("[0] " + MARKER + '{"kind": "nonsense"}') is None  # unknown kind: not an event
    assert parse_line(MARKER + '{"kind": "step", "step": 4') is None      # cut short


def test_events_jsonl_skips_a_line_cut_short_by_a_crash() -> None:
    good = RunEvent("step", step=7, total=10, loss=0.5)
    text = good.to_json() + "\n" + '{"kind": "step", "st'
    assert read_events(text) == [good]


def test_the_submission_keeps_env_values_out_of_request_json(tmp_path: Path) -> None:
    request = TaskRequest(task="squad", demo=True, env=(("HF_TOKEN", "hf_s3cret"),), trainer_args=("--max-steps", "5"))
    nodes = [Node("node0", "n0", "10.0.0.2", "10.0.0.2", "master", "local")]
    plan = build_plan(request, get_stack("stock"), nodes, CpuTopology(1, 2, 1, 1, 2), "/root", "r1", {})
    submission = Submission(request, plan)
    text = submission.to_json()
    assert "hf_s3cret" not in text and "HF_TOKEN" in text
    back = Submission.from_json(text, submission.env_json())
    assert back.request == request and back.plan == plan
    assert json.loads(submission.env_json()) == {"HF_TOKEN": "hf_s3cret"}
