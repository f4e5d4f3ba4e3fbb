"""Issue 38: a node that joins a running job (a replacement, a growth, the master's successor) gets its data
work as an MPI rank started where its ranks will be started from, so that its warm rank server is up before
the next job's rank starts there; where that launch fails, the data work runs alone as before."""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from xeoncluster.core.stacks import get_stack
from xeoncluster.job.train_plan import dry_run_plan
from xeoncluster.job.train_request import TaskRequest
from xeoncluster.operations import train_prepare
from xeoncluster.operations.train_prepare import Preparer
from xeoncluster.providers.aws.provider import AwsProvider
from xeoncluster.providers.base import Node
from xeoncluster.remote.shell import CommandResult

MASTER = Node("node0", "i-0", "10.0.0.2", "10.0.0.2", "master", "spot")
WORKER = Node("node1", "i-1", "10.0.0.3", "10.0.0.3", "worker", "spot")
NEW = Node("node2", "i-2", "10.0.0.4", "10.0.0.4", "worker", "spot")
SUCCESSOR = Node("node0", "i-9", "10.0.0.9", "10.0.0.9", "master", "spot")


@dataclass
class Shell:
    fail_on: str = ""  # a command with this in it fails
    ran: list[tuple[str, str]] = field(default_factory=list)
    files: list[tuple[str, list[str]]] = field(default_factory=list)

    def run(self, nodes: list[Node], command: str) -> dict[str, CommandResult]:
        [node] = nodes
        self.ran.append((node.private_ip, command))
        failed = bool(self.fail_on) and self.fail_on in command
        return {node.name: CommandResult(node.name, 1 if failed else 0, "", "hydra: no way in" if failed else "")}

    def put_files(self, node: Node, files: list[Any]) -> None:
        self.files.append((node.private_ip, list(files)))


@pytest.fixture
def preparer(monkeypatch: pytest.MonkeyPatch) -> Preparer:
    monkeypatch.setattr(train_prepare, "master_ssh_files", lambda _ctx, nodes: [n.name + "@" + n.private_ip
                                                                               for n in nodes])
    reporter = SimpleNamespace(step=lambda _what: contextlib.nullcontext(), detail=lambda _: None,
                               warn=lambda _: None)
    ctx = SimpleNamespace(reporter=reporter)
    return Preparer(ctx, TaskRequest(task="squad", demo=True), get_stack("stock"), [NEW])  # type: ignore[arg-type]


def launch() -> Any:
    topology = AwsProvider("us-east-1").machine_topology("c7i.2xlarge")
    plan = dry_run_plan(TaskRequest(task="squad", demo=True), get_stack("stock"), topology, "c7i.2xlarge", 2,
                        "ubuntu")
    return dataclasses.replace(plan, nodes=(MASTER, WORKER))


def test_a_worker_s_data_work_is_a_rank_mpiexec_starts_from_the_master(preparer: Preparer) -> None:
    shell = Shell()
    preparer._warm_data(shell, NEW, "/home/ubuntu", "r1", {}, launch())  # type: ignore[arg-type]
    [(where, command)] = shell.ran
    assert where == MASTER.private_ip and "mpiexec.hydra -hosts node2 -n 1 -ppn 1 " in command
    assert "--warm-data" in command and "-genv OMP_NUM_THREADS" in command
    # The master's ssh files name the new node beside the job's own.
    assert shell.files == [(MASTER.private_ip, ["node0@10.0.0.2", "node1@10.0.0.3", "node2@10.0.0.4"])]


def test_the_master_s_successor_starts_its_own_rank(preparer: Preparer) -> None:
    """It has the master's name, and will start its own rank once it is the master: from itself, with ssh
    files naming only it."""
    shell = Shell()
    preparer._warm_data(shell, SUCCESSOR, "/home/ubuntu", "r1", {}, launch())  # type: ignore[arg-type]
    [(where, command)] = shell.ran
    assert where == SUCCESSOR.private_ip and "-hosts node0 -n 1 -ppn 1 " in command
    assert shell.files == [(SUCCESSOR.private_ip, ["node0@10.0.0.9"])]


def test_where_the_rank_cannot_be_launched_the_data_work_runs_alone(preparer: Preparer) -> None:
    shell = Shell(fail_on="mpiexec.hydra")
    preparer._warm_data(shell, NEW, "/home/ubuntu", "r1", {}, launch())  # type: ignore[arg-type]
    assert [where for where, _ in shell.ran] == [MASTER.private_ip, NEW.private_ip]
    alone = shell.ran[1][1]
    assert alone.startswith("env ") and "mpiexec" not in alone and "--warm-data" in alone
