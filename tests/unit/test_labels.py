"""Rank labels keep every line whole, also when two threads of a rank print at once (the notice
watcher's event beside the training loop's lines)."""
from __future__ import annotations

import io
import threading

import pytest

from xeoncluster.node.events.events import EVENT_KEY_ENV, NoticeEvent, emit, event_line, parse_line
from xeoncluster.node.events.labels import LabelledWriter

KEY = "ab" * 32  # a launch's key, as the agent draws it


def test_a_line_another_thread_prints_between_a_prints_text_and_its_newline_stays_apart() -> None:
    out = io.StringIO()
    writer = LabelledWriter(out, "[1] ")
    half_written, event_written = threading.Event(), threading.Event()

    def training_loop() -> None:
        writer.write("step 7/14")  # print() writes the text, then the newline, in two calls
        half_written.set()
        event_written.wait(5)
        writer.write("\n")

    loop = threading.Thread(target=training_loop)
    loop.start()
    half_written.wait(5)
    writer.write(event_line(NoticeEvent(rank=1, node="10.0.0.2", time=1.0), KEY) + "\n")
    event_written.set()
    loop.join(5)
    lines = out.getvalue().splitlines()
    assert sorted(lines) == sorted(["[1] " + event_line(NoticeEvent(rank=1, node="10.0.0.2", time=1.0), KEY),
                                    "[1] step 7/14"])
    events = [e for e in (parse_line(line, KEY) for line in lines) if e is not None]
    assert [e.kind for e in events] == ["notice"]


def test_lines_printed_from_many_threads_all_stay_whole() -> None:
    out = io.StringIO()
    writer = LabelledWriter(out, "[0] ")

    def printer(tag: str) -> None:
        for i in range(2000):
            print(f"{tag} {i}", file=writer, flush=True)

    threads = [threading.Thread(target=printer, args=(tag,)) for tag in ("a", "b", "c")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = out.getvalue().splitlines()
    assert len(lines) == 6000 and all(line.count(" ") == 2 and line.startswith("[0] ") for line in lines)


def test_flush_and_close_end_an_unfinished_line() -> None:
    out = io.StringIO()
    writer = LabelledWriter(out, "[0] ")
    writer.write("no newline")
    writer.flush()
    done = threading.Thread(target=writer.write, args=("from a thread that ended",))
    done.start()
    done.join()
    writer.close()
    assert out.getvalue() == "[0] no newline\n[0] from a thread that ended\n"


def test_emit_writes_one_parsable_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EVENT_KEY_ENV, KEY)
    emit(NoticeEvent(rank=1, node="10.0.0.2", reason="spot interruption"))
    event = parse_line(capsys.readouterr().out.strip(), KEY)
    assert event is not None and event.kind == "notice" and event.node == "10.0.0.2"
