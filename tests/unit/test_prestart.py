"""Issue 38 item 1, below the agent: the job started ahead of a swap is the same launch on its own hostfile
and rendezvous port, held until its release; its ranks wait for the release file and give up without one;
its log lines wait until it is the run's."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from xeoncluster.agent.attempt import Attempt
from xeoncluster.core.stacks import get_stack
from xeoncluster.job.train_plan import AHEAD_PORT, dry_run_plan
from xeoncluster.job.train_request import TaskRequest
from xeoncluster.node.diagnostics.startup_clock import describe
from xeoncluster.node.events.events import HeldEvent, event_line
from xeoncluster.node.startup.errors import TrainingError
from xeoncluster.node.startup.hold import wait_for_release
from xeoncluster.providers.aws.provider import AwsProvider
from xeoncluster.remote.shell import CommandResult
from xeoncluster.runs.record import RankStartup, RunFiles


def plan_of_two():
    topology = AwsProvider("us-east-1").machine_topology("c7i.2xlarge")
    return dry_run_plan(TaskRequest(task="squad", demo=True), get_stack("stock"), topology, "c7i.2xlarge", 2, "ubuntu")


def test_a_job_started_ahead_is_the_same_launch_on_its_own_hostfile_and_port_held_until_its_release() -> None:
    plan = plan_of_two()
    ahead = plan.ahead("/r/.xc-ahead/hosts", "/r/.xc-ahead/release-1", plan.port)
    env = dict(ahead.ranks.env)
    assert env["MASTER_PORT"] == AHEAD_PORT != plan.port and env["XC_HOLD_FILE"] == "/r/.xc-ahead/release-1"
    argv = list(ahead.argv)
    assert argv[1:3] == ["-f", "/r/.xc-ahead/hosts"] and argv[argv.index("MASTER_PORT") + 1] == AHEAD_PORT
    assert argv[argv.index("XC_HOLD_FILE") + 1] == "/r/.xc-ahead/release-1"
    assert tuple(argv[-len(plan.program):]) == plan.program == tuple(plan.argv[-len(plan.program):])
    # The job after that one, started while the one ahead holds the other port, goes back to the first.
    again = ahead.ahead("/r/.xc-ahead/hosts", "/r/.xc-ahead/release-2", ahead.port)
    assert again.port == plan.port and dict(again.ranks.env)["XC_HOLD_FILE"] == "/r/.xc-ahead/release-2"
    assert list(again.argv).count("XC_HOLD_FILE") == 1


def test_held_ranks_go_on_at_their_release_and_give_up_without_one(tmp_path: Path) -> None:
    release = tmp_path / "release"
    threading.Timer(0.3, release.touch).start()
    started = time.monotonic()
    waited = wait_for_release(release, seconds=10)
    assert 0.25 < waited < 1.0 and time.monotonic() - started < 1.0
    with pytest.raises(TrainingError, match=r"not released within 0\.2s"):
        wait_for_release(tmp_path / "never", seconds=0.2)


def test_a_held_start_says_what_followed_its_release_and_the_hold_is_no_start() -> None:
    metrics = {"startup_libraries_s": 3.0, "startup_trainer_s": 1.0, "startup_held_s": 20.0, "startup_resume_s": 0.5}
    assert describe(metrics) == ("0.5s (resume 0.5) after its release, having started 4.0s (libraries 3.0, "
                                 "trainer 1.0) ahead of it and waited 20.0s for it")
    assert RankStartup(rank=1, parts={"libraries": 3.0, "held": 20.0, "resume": 0.5}).seconds == 3.5


class StreamingShell:
    """Streams the lines it is given to the attempt, one at a time, when the test says."""

    def __init__(self, lines: list[str]) -> None:
        self.lines, self.commands, self.go = lines, [], threading.Event()

    def stream(self, nodes, command, sink):
        self.commands.append(command)
        for line in self.lines:
            self.go.wait()
            sink(nodes[0].name, line)
        return {nodes[0].name: CommandResult(nodes[0].name, 0, "", "")}

    def run(self, nodes, command):
        self.commands.append(command)
        return {n.name: CommandResult(n.name, 0, "", "") for n in nodes}


def test_a_held_job_s_lines_wait_until_it_is_the_run_s_and_it_never_clears_the_stop_request(tmp_path: Path) -> None:
    files = RunFiles(tmp_path)
    files.log.write_text("old job's line\n")
    plan = plan_of_two()
    events = []
    attempt = Attempt(None, plan, files, events.append, pid_file=".xc-ahead/launcher-29501.pid", held=True)
    shell = StreamingShell(["[0] importing", "[0] " + event_line(HeldEvent(time=1.0), attempt.event_key), "[0] step 1"])
    runner = threading.Thread(target=attempt.run, args=(shell,))
    runner.start()
    shell.go.set()
    runner.join()
    assert files.log.read_text() == "old job's line\n" and [e.kind for e in events] == ["held"]
    assert "rm -f" not in shell.commands[0] and ".xc-ahead/launcher-29501.pid" in shell.commands[0]
    attempt.release_log()
    assert files.log.read_text().splitlines()[1:] == [f"$ {plan.command()}", "[0] importing", "[0] step 1"]
    attempt.interrupt(shell)
    assert ".xc-ahead/launcher-29501.pid" in shell.commands[-1]
