"""A node's streamed output is handed on in whole lines: invoke flushes after every read it makes, and a
line that arrives in two reads (an event line of a few hundred bytes, a long log line) must stay one."""
from __future__ import annotations

from xeoncluster.remote.fabric_shell import LineSink


def test_a_line_split_across_reads_stays_whole_and_the_last_one_comes_at_the_end() -> None:
    got: list[tuple[str, str]] = []
    sink = LineSink("node0", lambda node, line: got.append((node, line)))
    for part in ('[0] @xc-event {"kind": "failed", "version":', ' 2}\n[0] next', " line\nno newline"):
        sink.write(part)
        sink.flush()  # as invoke does after each write
    assert got == [("node0", '[0] @xc-event {"kind": "failed", "version": 2}'), ("node0", "[0] next line")]
    sink.finish()
    assert got[-1] == ("node0", "no newline")
