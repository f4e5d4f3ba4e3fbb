"""The node watch stops a job as soon as the provider no longer lists one of its nodes, and not
on a failed question."""
from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from xeoncluster.agent.node_watch import NodeWatch
from xeoncluster.errors import ProviderError


class Fleet:
    """The provider's answers, in order; the last one repeats."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)

    def nodes(self, config: object, priced: bool = True) -> list[SimpleNamespace]:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return [SimpleNamespace(name=name) for name in answer]


def watch(fleet: Fleet, names: list[str]) -> tuple[NodeWatch, threading.Event, list[list[str]]]:
    called, seen = threading.Event(), []

    def on_gone(gone: list[str]) -> None:
        seen.append(gone)
        called.set()
    ctx = SimpleNamespace(provider=fleet, config=None)
    return NodeWatch(ctx, names, on_gone, interval=0.01), called, seen  # type: ignore[arg-type]


def test_a_node_the_provider_stops_listing_stops_the_job_once() -> None:
    fleet = Fleet(["node0", "node1"], ProviderError("DescribeInstances throttled"), ["node0", "node1"], ["node0"])
    node_watch, called, seen = watch(fleet, ["node0", "node1"])
    with node_watch:
        assert called.wait(5)
    assert seen == [["node1"]] and node_watch.gone == ["node1"]


def test_nothing_happens_while_every_node_is_listed_or_the_question_fails() -> None:
    node_watch, called, seen = watch(Fleet(["node0", "node1"], ProviderError("no answer"), ["node1", "node0"]),
                                     ["node0", "node1"])
    with node_watch:
        assert not called.wait(0.3)
    assert seen == []


def test_no_names_ask_nothing() -> None:
    fleet = Fleet(RuntimeError("the provider was asked"))
    node_watch, called, _ = watch(fleet, [])
    with node_watch:
        assert not called.wait(0.1)
    assert node_watch._thread is None
