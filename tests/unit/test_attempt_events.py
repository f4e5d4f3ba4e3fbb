"""What the run agent takes for an event on a launch's output: only lines signed with the key it drew for
that launch. A user's script, a library or the data can print anything, a notice in the ranks' exact form
included; that is a log line, and it replaces no node, hands nothing over and restarts nothing."""
from __future__ import annotations

from pathlib import Path

from test_prestart import StreamingShell, plan_of_two

from xeoncluster.agent.attempt import Attempt
from xeoncluster.node.events.events import EVENT_KEY_ENV, MARKER, NoticeEvent, StepEvent, event_line
from xeoncluster.runs.record import RunFiles

NOTICE = NoticeEvent(rank=1, node="10.0.0.5", reason="spot interruption notice", deadline=1795514520.0)


def test_a_printed_notice_is_a_log_line_and_only_the_launch_s_own_signature_makes_an_event(tmp_path: Path) -> None:
    files, events = RunFiles(tmp_path), []
    attempt = Attempt(None, plan_of_two(), files, events.append)  # type: ignore[arg-type]  # no context needed
    printed = [f"[1] {MARKER}{NOTICE.to_json()}",                        # the form ranks used before
               f"[1] {event_line(NOTICE, 'cd' * 32)}",                    # signed under another launch's key
               f"[1] {event_line(NOTICE, attempt.event_key).replace('10.0.0.5', '10.0.0.6')}"]  # changed
    step = event_line(StepEvent(step=3, total=10), attempt.event_key)
    shell = StreamingShell([*printed, f"[0] {step}"])
    shell.go.set()
    attempt.run(shell)  # type: ignore[arg-type]  # what Attempt uses of a shell
    assert [(e.kind, e.rank) for e in events] == [("step", 0)]
    assert files.log.read_text().splitlines()[1:] == printed
    assert files.events.read_text().count("\n") == 1


def test_each_launch_draws_its_own_key_and_hands_it_only_to_the_ranks(tmp_path: Path) -> None:
    plan = plan_of_two()
    one, two = (Attempt(None, plan, RunFiles(tmp_path), lambda e: None) for _ in range(2))  # type: ignore[arg-type]
    assert len(one.event_key) == 64 and one.event_key != two.event_key
    shell = StreamingShell([])
    shell.go.set()
    one.run(shell)  # type: ignore[arg-type]
    assert f"-genv {EVENT_KEY_ENV} {one.event_key}" in shell.commands[0]
    assert one.event_key not in RunFiles(tmp_path).log.read_text()  # the logged command is plan.command()
