"""The typed events between the ranks and the agent, and what `train` hands the agent."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from xeoncluster.core.stacks import get_stack
from xeoncluster.job.train_plan import build_plan
from xeoncluster.job.train_request import TaskRequest
from xeoncluster.node.events.events import (
    EVENT_TYPES,
    MARKER,
    CheckpointEvent,
    EvalEvent,
    FailedEvent,
    FinishedEvent,
    HeldEvent,
    NoticeEvent,
    ReadyEvent,
    StartedEvent,
    StepEvent,
    StoppedEvent,
    event_from_json,
    event_line,
    parse_line,
    read_events,
    signature,
)
from xeoncluster.providers.base import Node
from xeoncluster.runs.submission import Submission
from xeoncluster.topology import CpuTopology

KEY = "ab" * 32  # a launch's key, as the agent draws it


def test_events_travel_as_marked_lines_with_or_without_the_rank_label() -> None:
    event = NoticeEvent(rank=3, node="10.0.0.7", reason="spot interruption notice", deadline=1795514520.0)
    line = event_line(event, KEY)
    assert parse_line(line, KEY) == event
    relabelled = parse_line(f"[5] {line}", KEY)
    assert relabelled is not None and relabelled.rank == 5 and relabelled.reason == event.reason
    assert parse_line("[0] step 3/10  loss 1.2", KEY) is None
    nonsense = '{"kind": "nonsense"}'
    assert parse_line(f"[0] {MARKER}{signature(KEY, nonsense)} {nonsense}", KEY) is None  # unknown kind
    cut = '{"kind": "step", "step": 4'
    assert parse_line(f"{MARKER}{signature(KEY, cut)} {cut}", KEY) is None                 # cut short


def test_a_line_printed_in_the_form_of_an_event_is_a_log_line() -> None:
    """The job's stdout carries whatever a user's script or its data prints: a notice in the exact form the
    ranks once used, one signed under another launch's key, or a real event's line with its JSON changed."""
    notice = NoticeEvent(rank=3, node="10.0.0.7", reason="spot interruption notice", deadline=1795514520.0)
    text = notice.to_json()
    assert parse_line(f"[3] {MARKER}{text}", KEY) is None                     # unsigned, as before
    assert parse_line(event_line(notice, "cd" * 32), KEY) is None             # another launch's key
    forged = event_line(notice, KEY).replace("10.0.0.7", "10.0.0.9")
    assert parse_line(forged, KEY) is None                                    # signed JSON, changed
    assert parse_line(event_line(notice, ""), "") is None                     # no key: nothing is an event


def test_events_jsonl_skips_a_line_cut_short_by_a_crash() -> None:
    good = StepEvent(step=7, total=10, loss=0.5)
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


# What the ranks printed before each kind was a class of its own (one flat RunEvent): every line must
# still parse, to its kind's class, and print again byte for byte.
FLAT_LINES = (
    '{"kind": "started", "metrics": {"import": 1.5}, "node": "10.0.0.2", "rank": 0, "step": 0, "time": 1.0, '
    '"total": 10, "version": 2}',
    '{"kind": "ready", "metrics": {"startup_libraries_s": 3.5}, "node": "10.0.0.3", "rank": 1, "step": 0, "time": 1.5, '
    '"total": 10, "version": 2}',
    '{"kind": "held", "node": "10.0.0.2", "rank": 0, "time": 1.7, "version": 2}',
    '{"kind": "step", "loss": 0.5, "node": "10.0.0.2", "rank": 0, "step": 1, "time": 2.0, "total": 10, "version": 2}',
    '{"kind": "eval", "metrics": {"em": null, "f1": 80.5}, "node": "10.0.0.2", "rank": 0, "step": 5, "time": 3.0, '
    '"total": 10, "version": 2}',
    '{"kind": "checkpoint", "node": "10.0.0.2", "rank": 0, "step": 5, "time": 4.0, "total": 10, "version": 2}',
    '{"deadline": 1795514520.0, "kind": "notice", "node": "10.0.0.3", "rank": 1, "reason": "spot interruption '
    'notice", "time": 5.0, "version": 2}',
    '{"kind": "stopped", "node": "10.0.0.2", "rank": 0, "reason": "notice", "step": 6, "time": 6.0, "version": 2}',
    '{"kind": "finished", "metrics": {"f1": 81.0}, "node": "10.0.0.2", "rank": 0, "step": 10, "time": 7.0, '
    '"total": 10, "version": 2}',
    '{"kind": "failed", "lines": ["Traceback", "ValueError: boom"], "node": "10.0.0.4", "rank": 2, "reason": "boom", '
    '"time": 8.0, "version": 2}',
)


def test_each_kind_parses_to_its_own_class_and_prints_the_same_bytes() -> None:
    events = read_events("\n".join(FLAT_LINES))
    assert [type(e) for e in events] == [StartedEvent, ReadyEvent, HeldEvent, StepEvent, EvalEvent, CheckpointEvent,
                                         NoticeEvent, StoppedEvent, FinishedEvent, FailedEvent]
    assert sorted(e.kind for e in events) == sorted(EVENT_TYPES)  # every kind, each once
    assert tuple(e.to_json() for e in events) == FLAT_LINES
    failed = events[-1]
    assert isinstance(failed, FailedEvent) and failed.lines == ("Traceback", "ValueError: boom")


def test_an_unknown_kind_is_skipped_and_fields_of_another_kind_are_dropped() -> None:
    text = '{"kind": "rebalanced", "time": 1.0}\n' + FLAT_LINES[3]
    assert [e.kind for e in read_events(text)] == ["step"]
    with pytest.raises(ValueError, match="unknown event kind"):
        event_from_json('{"kind": "rebalanced", "time": 1.0}')
    step = event_from_json('{"kind": "step", "step": 3, "reason": "not a step field", "time": 1.0}')
    assert isinstance(step, StepEvent) and step.step == 3 and not hasattr(step, "reason")
