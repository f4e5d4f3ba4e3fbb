"""Following a run by byte offset: whole lines only, and a dropped connection goes on where it was,
with no line lost or shown twice (the agent's host here is this machine, through real shell commands)."""
from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from xeoncluster.core.errors import RemoteError, TrainingError
from xeoncluster.node.events.events import RunEvent, StepEvent
from xeoncluster.remote.shell import CommandResult
from xeoncluster.runs.follow import CHUNK_BYTES, Follower, read_chunk
from xeoncluster.runs.host import LocalHost
from xeoncluster.runs.record import RunFiles, RunRecord, RunState


def files(tmp_path: Path) -> RunFiles:
    folder = tmp_path / "clusters" / "c1" / "runs" / "r1"
    folder.mkdir(parents=True)
    return RunFiles(folder)


def test_only_whole_lines_are_read_and_offsets_count_bytes(tmp_path: Path) -> None:
    run = files(tmp_path)
    run.save(RunRecord(run="r1", cluster="c1", task="squad", state=RunState.RUNNING))
    run.log.write_text("[0] step 1/4  loss é\n[0] step 2/4 (half a li")
    host = LocalHost(str(tmp_path), "python3")
    chunk = read_chunk(host, "c1", "r1", 0)
    assert chunk.lines == ["[0] step 1/4  loss é"] and chunk.consumed == len("[0] step 1/4  loss é\n".encode())
    assert chunk.record is not None and chunk.record.state is RunState.RUNNING
    with open(run.log, "a") as log:
        log.write("ne)\n")
    assert read_chunk(host, "c1", "r1", chunk.consumed).lines == ["[0] step 2/4 (half a line)"]


def test_a_dropped_connection_resumes_without_loss_or_repeat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("xeoncluster.runs.follow.POLL_SECONDS", 0.05)
    monkeypatch.setattr("xeoncluster.runs.follow.RECONNECT_DELAYS", (0.05,) * 6)
    run = files(tmp_path)
    record = RunRecord(run="r1", cluster="c1", task="squad", state=RunState.RUNNING)
    run.save(record)
    run.log.write_text("")
    connects: list[int] = []

    def connect() -> LocalHost:
        connects.append(1)
        if len(connects) in (2, 3):  # the second and third attempts fail: the network went away
            raise RemoteError("node0 (10.0.0.5) is unreachable over SSH: Connection reset by peer")
        return FlakyHost(str(tmp_path), "python3", fail_after=5 if len(connects) == 1 else None)

    def writer() -> None:
        for step in range(1, 41):
            with open(run.log, "a") as log:
                log.write(f"[0] step {step}/40\n")
            time.sleep(0.01)
        run.save(record.model_copy(update={"state": RunState.SUCCEEDED}))

    thread = threading.Thread(target=writer)
    thread.start()
    shown: list[str] = []
    said: list[str] = []
    final = Follower(connect, "c1", "r1", shown.append, said.append).follow()
    thread.join()
    assert final.state is RunState.SUCCEEDED
    assert shown == [f"[0] step {s}/40" for s in range(1, 41)]
    assert len(connects) == 4 and said and "reconnecting" in said[0] and "the run goes on" in said[0]


class FlakyHost(LocalHost):
    """This machine, but the connection breaks after `fail_after` commands."""

    def __init__(self, home: str, python: str, fail_after: int | None) -> None:
        super().__init__(home, python)
        self.left = fail_after

    def run(self, command: str) -> CommandResult:
        if self.left is not None:
            if self.left == 0:
                raise RemoteError("node0 (10.0.0.5) is unreachable over SSH: transport shut down")
            self.left -= 1
        return super().run(command)


def dead_pid() -> int:
    done = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    return int(done.stdout)


@pytest.mark.parametrize("removed", [True, False])
def test_an_agent_found_dead_is_told_apart_from_a_cluster_being_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, removed: bool) -> None:
    """`down --force` stops the agent and removes the run's folder a little later: a follower that sees
    the dead agent in between must still say the cluster was removed, not that the agent crashed."""
    monkeypatch.setattr("xeoncluster.runs.follow.POLL_SECONDS", 0.05)
    monkeypatch.setattr("xeoncluster.runs.follow.ALIVE_EVERY", 1)
    monkeypatch.setattr("xeoncluster.runs.follow.REMOVAL_GRACE_SECONDS", 1.0)
    run = files(tmp_path)
    run.save(RunRecord(run="r1", cluster="c1", task="squad", state=RunState.RUNNING, agent_pid=dead_pid()))
    run.log.write_text("[0] step 1/40\n")
    if removed:
        threading.Timer(0.4, shutil.rmtree, (run.path,)).start()
    follower = Follower(lambda: LocalHost(str(tmp_path), "python3"), "c1", "r1", lambda _: None, lambda _: None)
    with pytest.raises(TrainingError) as raised:
        follower.follow()
    if removed:
        assert raised.value.message == "no run 'r1' on cluster 'c1' any more: the cluster was removed while it ran"
    else:
        assert raised.value.message.startswith("the run agent of r1 on ") and "stopped before the run ended" in \
            raised.value.message


class ReplacingHost(LocalHost):
    """This machine, with stdout decoded as Fabric decodes a remote's: UTF-8 with replacement."""

    def run(self, command: str) -> CommandResult:
        done = subprocess.run(["bash", "-c", command], capture_output=True)
        return CommandResult(self.name, done.returncode, done.stdout.decode("utf-8", "replace"),
                             done.stderr.decode("utf-8", "replace"))


def test_offsets_count_bytes_past_a_bad_byte_and_a_line_over_a_chunk_shows_in_pieces(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("xeoncluster.runs.follow.POLL_SECONDS", 0.01)
    run = files(tmp_path)
    run.save(RunRecord(run="r1", cluster="c1", task="squad", state=RunState.SUCCEEDED))
    long = "x" + "é" * CHUNK_BYTES  # 2 MiB and a byte: the pieces are cut where a character ends
    log = b"[0] caf\xe9 \x1b]0;title\x07\n" + long.encode() + b"\n[0] after\r\n"
    run.log.write_bytes(log)
    shown: list[str] = []
    follower = Follower(lambda: ReplacingHost(str(tmp_path), "python3"), "c1", "r1", shown.append, lambda _: None)
    follower.follow(to_the_end=False)
    assert shown[0] == "[0] caf\ufffd ␛]0;title␇" and shown[-1] == "[0] after"
    assert "".join(shown[1:-1]) == long and len(shown) == 5  # three pieces, none repeated or lost
    assert follower.offset == len(log)


def test_step_events_are_followed_by_byte_offset_beside_the_log(tmp_path: Path) -> None:
    run = files(tmp_path)
    run.save(RunRecord(run="r1", cluster="c1", task="squad", state=RunState.SUCCEEDED))
    run.log.write_text("[0] step 1/4\n")
    step = StepEvent(time=1.0, step=1, total=4, loss=0.5)
    events = f"{step.to_json()}\nnot an event\n{{\"kind\": \"bogus\"}}\n{step.to_json()}\n{{\"kind\": \"st"
    run.events.write_text(events)
    host = ReplacingHost(str(tmp_path), "python3")
    chunk = read_chunk(host, "c1", "r1", 0, events_offset=0)
    assert chunk.lines == ["[0] step 1/4"] and chunk.events == [step, step]
    assert chunk.events_consumed == events.rindex("\n") + 1
    assert read_chunk(host, "c1", "r1", 0).events == []  # not asked for: not read
    seen: list[RunEvent] = []
    Follower(lambda: host, "c1", "r1", lambda _: None, lambda _: None, steps=seen.append).follow(to_the_end=False)
    assert seen == [step, step]
