"""Notice sources and what a notice does under each policy (one process; the all-reduce is a no-op)."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from xeoncluster.node.checkpoints.interruption import NoticeWatcher, Policy, StopOnNotice, WatchSettings
from xeoncluster.node.checkpoints.notices import AwsImds, Notice, StopFile, sources_from_env


class FakeImds:
    """IMDSv2 on loopback: token first, then whatever the test put in `paths`."""

    def __init__(self) -> None:
        self.paths: dict[str, str] = {}
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                self._reply(200, "token") if self.path == "/latest/api/token" else self._reply(404, "")

            def do_GET(self) -> None:
                if self.headers.get("X-aws-ec2-metadata-token") != "token":
                    return self._reply(401, "")
                body = owner.paths.get(self.path.removeprefix("/latest/"))
                self._reply(200, body) if body is not None else self._reply(404, "")

            def _reply(self, status: int, body: str) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/latest"


@pytest.fixture
def imds() -> Iterator[FakeImds]:
    fake = FakeImds()
    yield fake
    fake.server.shutdown()


def test_imds_reports_the_interruption_with_its_deadline_and_a_rebalance(imds: FakeImds) -> None:
    source = AwsImds(base=imds.base)
    assert source.poll() is None
    imds.paths["meta-data/events/recommendations/rebalance"] = '{"noticeTime": "2026-11-24T10:00:00Z"}'
    rebalance = source.poll()
    assert rebalance is not None and rebalance.kind == "rebalance"
    imds.paths["meta-data/spot/instance-action"] = '{"action": "terminate", "time": "2026-11-24T10:02:00Z"}'
    notice = source.poll()
    assert notice is not None and notice.kind == "interruption"
    assert notice.deadline == 1795514520.0  # 2026-11-24T10:02:00Z


def test_sources_come_from_the_environment(tmp_path: Path) -> None:
    found = sources_from_env({"XC_STOP_FILE": str(tmp_path / "stop"), "XC_NOTICES": "aws-imds"})
    assert [type(s).__name__ for s in found] == ["StopFile", "AwsImds"]
    with pytest.raises(ValueError, match="unknown notice source 'gcp'"):
        sources_from_env({"XC_NOTICES": "gcp"})


class Fixed:
    def __init__(self, notice: Notice | None) -> None:
        self.notice = notice

    def poll(self) -> Notice | None:
        return self.notice


def step_end(stop: StopOnNotice, step: int) -> SimpleNamespace:
    control = SimpleNamespace(should_save=False, should_training_stop=False)
    stop.on_step_end(None, SimpleNamespace(global_step=step), control)
    return control


@pytest.fixture
def printed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    lines: list[str] = []
    monkeypatch.setattr("xeoncluster.node.checkpoints.interruption.emit", lambda event: lines.append(event.to_json()))
    return lines


def watch(policy: Policy, *sources: Any) -> NoticeWatcher:
    return NoticeWatcher(WatchSettings(tuple(sources), policy, interval=0.01, margin=5), 1, "10.0.0.5").start()


def test_under_the_agent_a_notice_is_reported_and_training_goes_on_until_the_deadline_is_close(
        printed: list[str]) -> None:
    far = time.time() + 3600
    watcher = watch("report", Fixed(Notice("interruption", "spot interruption notice", far)))
    time.sleep(0.1)
    stop = StopOnNotice(watcher)
    assert not step_end(stop, 1).should_training_stop
    [event] = [json.loads(line) for line in printed]
    assert (event["kind"], event["rank"], event["node"], event["deadline"]) == ("notice", 1, "10.0.0.5", far)
    watcher.deadline = (time.time() + 2, "spot interruption notice")  # now inside the margin
    control = step_end(stop, 2)
    assert control.should_training_stop and control.should_save and stop.stopped_at == 2
    watcher.stop()


def test_a_slow_save_widens_the_reserve_before_a_deadline(printed: list[str]) -> None:
    """The ranks stop early enough for the step in flight and the checkpoint: two saves' worth when
    a save takes longer than the margin allows for."""
    watcher = watch("report")
    stop = StopOnNotice(watcher)
    assert not step_end(stop, 1).should_training_stop
    watcher.deadline = (time.time() + 8, "spot interruption notice")  # outside the 5 s margin
    assert not step_end(stop, 2).should_training_stop
    stop._last_end = time.time() - 3  # the checkpoint of step 2 took 3 s: 6 s of reserve, then 8
    stop.on_save(None, None, None)
    assert watcher.should_stop(time.time(), 0.0, stop._save_seconds) is None
    stop._save_seconds = 4.5
    control = step_end(stop, 3)
    assert control.should_training_stop and stop.stopped_at == 3
    watcher.stop()


def test_the_stop_file_stops_at_the_next_step_and_without_an_agent_so_does_a_notice(
        tmp_path: Path, printed: list[str]) -> None:
    stop_file = tmp_path / "stop"
    watcher = watch("report", StopFile(stop_file))
    stop = StopOnNotice(watcher)
    assert not step_end(stop, 1).should_training_stop
    stop_file.touch()
    time.sleep(0.1)
    assert step_end(stop, 2).should_training_stop and stop.reason == "stop requested"
    alone = watch("stop", Fixed(Notice("interruption", "spot interruption notice", time.time() + 3600)))
    time.sleep(0.1)
    assert step_end(StopOnNotice(alone), 1).should_training_stop
