"""What the cluster wrote reaches the terminal through the display door: a run's task, error, restart
reasons, swept values, node names and log lines print as text (markup literal, no control sequence but
SGR), and the live progress bar is drawn from step events, never from log text."""
from __future__ import annotations

import io
import re

import pytest

from xeoncluster.cli import render, render_runs
from xeoncluster.cli.render_training import TrainingLines
from xeoncluster.commands.compare import Compared
from xeoncluster.commands.status import NodeStatus, StatusResult
from xeoncluster.node.events.events import StartedEvent, StepEvent
from xeoncluster.providers.base import Node
from xeoncluster.runs.record import NodeUse, Restart, RunRecord, RunState

EVIL = "[/b]evil\x1b]52;c;aGk=\x07\x1b[2J\x9b2J"


def safe(output: str) -> bool:
    """No escape sequence but SGR, no C1, no BEL/CR/BS."""
    return "\x1b" not in re.sub(r"\x1b\[[0-9;]*m", "", output) and not re.search(r"[\x07\x08\r\x80-\x9f]", output)


def evil_record(**update: object) -> RunRecord:
    record = RunRecord(run="r1", cluster="c1", task=EVIL, state=RunState.RUNNING, step=3, total_steps=10,
                       error=EVIL, sweep="s", params={"lr": EVIL}, usage={f"node0{EVIL}": NodeUse(cpu_percent=9)},
                       restarts=[Restart(node="node1", reason=EVIL, from_step=2, seconds=5, lost_steps=1)])
    return record.model_copy(update=update)


def test_runs_shows_a_task_with_markup_and_escapes_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    render_runs.runs_table([evil_record()], "c1", [f"note {EVIL}"], {})
    out = capsys.readouterr().out
    assert safe(out), repr(out)
    assert "[/b]evil␛]52;c;aGk=␇" in out and "node0[/b]evil␛]52" in out and "note [/b]evil" in out


def test_compare_shows_swept_values_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    render_runs.compare_table([Compared(evil_record(state=RunState.SUCCEEDED), {"f1": 80.0}, 1.0, 0.5)])
    out = capsys.readouterr().out
    assert safe(out) and "lr=[/b]evil␛]52;c" in out


def test_a_finished_run_shows_its_restart_reasons_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    from xeoncluster.commands.train.train import TrainOutcome

    render_runs.training_result(TrainOutcome(evil_record(state=RunState.FAILED)), "c1")
    out = capsys.readouterr().out
    assert safe(out) and "node1 lost ([/b]evil␛]52;c;aGk=␇" in out


def test_status_shows_node_names_watch_status_and_the_run_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    node = Node(name=f"node0{EVIL}", id="i-1", private_ip="10.0.0.2", ssh_host="10.0.0.2", role="master",
                market="local", state=EVIL)
    render.status_table(StatusResult("c1", "local", (NodeStatus(node, False, detail=EVIL),), evil_record(),
                                     notes=(EVIL,), autostop=f"not idle: {EVIL}"))
    out = capsys.readouterr().out
    assert safe(out), repr(out)
    assert "node0[/b]evil" in out and "not idle: [/b]evil␛]52" in out


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_line_like_a_step_with_markup_prints_as_text() -> None:
    """Log text never drives the bar: `step 3/10 loss [/x]` is a line like any other."""
    out = Terminal()
    sink = TrainingLines(out)
    sink("step 3/10 loss [/x]")
    sink(f"[0] {EVIL}")
    sink.close()
    assert out.getvalue() == "step 3/10 loss [/x]\n[0] [/b]evil␛]52;c;aGk=␇␛[2J\\x9b2J\n"


def test_step_events_drive_the_bar_and_lines_print_above_it() -> None:
    out = Terminal()
    sink = TrainingLines(out)
    assert sink.steps() is not None and TrainingLines(io.StringIO()).steps() is None
    sink.step(StartedEvent(time=100.0, step=0, total=10))
    sink("[0] step 3/10  loss [/x]  (the bar shows this one)")
    for step in (1, 2, 3):
        sink.step(StepEvent(time=100.0 + step, step=step, total=10, loss=0.5 / step))
    sink(f"loss [/x] {EVIL}")
    sink.close()
    text = out.getvalue()
    # The bar draws itself with cursor controls of its own; none of the line's got through.
    assert "\x1b]" not in text and not re.search(r"[\x07\x9b]", text) and text.count("\x1b[2J") == 0
    assert "step 3/10" in text and "loss 0.1667" in text and "1.00 steps/s" in text and "eta 0:00:07" in text
    assert "loss [/x] [/b]evil␛]52" in text and "the bar shows this one" not in text


def test_not_a_terminal_prints_every_line_inert_and_ignores_events() -> None:
    out = io.StringIO()
    sink = TrainingLines(out)
    sink.step(StepEvent(step=1, total=2, loss=0.5))
    for line in ("[0] step 1/2  loss 0.5000", "\x1b[31mred\x1b[0m", EVIL):
        sink(line)
    assert out.getvalue() == "[0] step 1/2  loss 0.5000\n\x1b[31mred\x1b[0m\n[/b]evil␛]52;c;aGk=␇␛[2J\\x9b2J\n"
