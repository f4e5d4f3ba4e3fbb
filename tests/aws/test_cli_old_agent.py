"""This CLI on a cluster whose agent an earlier release installed (before 0.2: no version.json, records
without a version): reading works and says once what to do; `up` upgrades the agent, also while a run
of the old agent is at work, which goes on with its own code."""
from __future__ import annotations

import json

from recording_shell import listed_record

from tests.unit.test_old_records import RUN_JSON_0_1
from xeoncluster.remote.shell import CommandResult
from xeoncluster.runs.client import app_digest
from xeoncluster.wire.contract import VERSION


def master_from_0_1(shell, monkeypatch, running: bool = False) -> None:
    """node0 as 0.1 left it: its agent wrote no version.json, its run record has no version, and (with
    `running`) that run's agent is still at work."""
    shell.files["node0"] = [f for f in shell.files["node0"] if not f.path.endswith("version.json")]
    record = dict(RUN_JSON_0_1, state="running", ended_at=None) if running else RUN_JSON_0_1
    real = shell.answer

    def answer(call):
        if "*/run.json" in call.command:
            return CommandResult(call.node, 0, listed_record(record["run"], json.dumps(record)), "")
        if running and "/proc/4242/cmdline" in call.command:
            return CommandResult(call.node, 0, "alive\n", "")
        return real(call)

    monkeypatch.setattr(shell, "answer", answer)


def older_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "is older than this CLI" in line]


def test_runs_reads_an_old_agents_records_and_says_once_that_up_upgrades_it(xc, shell, monkeypatch):
    assert xc("up", "--name", "t1", "--nodes", "1").code == 0
    master_from_0_1(shell, monkeypatch)

    runs = xc("runs", "--name", "t1", "--json")

    assert runs.code == 0, runs.err
    listed = {r["run"]: r for r in json.loads(runs.out)}
    assert listed["squad-1"]["state"] == "succeeded" and listed["squad-1"]["restarts"] == 1
    assert older_lines(runs.err) == ["warning: the agent on cluster 't1' is older than this CLI (version 1 < "
                                     f"{VERSION}): `xeoncluster up --name t1` upgrades it, and an active run goes on"]

    assert xc("up", "--name", "t1").code == 0
    assert json.loads(shell.file_text("node0", "agent/version.json")) == {"version": VERSION, "app": app_digest()}
    again = xc("runs", "--name", "t1", "--json")
    assert again.code == 0 and older_lines(again.err) == []


def test_up_upgrades_the_agent_while_an_old_agents_run_goes_on(xc, shell, monkeypatch):
    assert xc("up", "--name", "t1", "--nodes", "1").code == 0
    master_from_0_1(shell, monkeypatch, running=True)
    before = len(shell.commands("node0"))

    up = xc("up", "--name", "t1")

    assert up.code == 0, up.err
    assert "upgraded the agent of cluster 't1' to version 2; run squad-1 goes on" in up.out + up.err
    sent = shell.commands("node0")[before:]
    assert any(f"xeoncluster/app/{app_digest()}" in c for c in sent)  # beside, not over, the old agent's code
    assert not any("rm -rf xeoncluster/app " in c or c.endswith("rm -rf xeoncluster/app") for c in sent)
    assert not any("4242" in c and "kill " in c and "kill -0" not in c for c in sent)  # the run's agent lives on
    assert json.loads(shell.file_text("node0", "agent/version.json"))["version"] == VERSION
