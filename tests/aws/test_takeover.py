"""Issue 36: a worker whose orphan watch runs the takeover while the master still runs (its beats only
late) takes nothing: not the lease, not a rank, not the master's place."""
from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator

import pytest
from aws_helpers import write_config

from xeoncluster.agent.takeover import Takeover
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.master_lease import LeaseBook
from xeoncluster.cluster.state import ClusterRecord, StateDir
from xeoncluster.core.progress import Reporter
from xeoncluster.providers.config import load_config
from xeoncluster.providers.registry import spec_for


@pytest.fixture
def worker_side(xc, shell) -> tuple[CommandContext, ClusterRecord]:
    """A cluster of two in moto, and the context its worker's takeover builds (the role, acting for the owner)."""
    write_config()
    assert xc("storage", "init", "--provider", "aws").code == 0
    assert xc("up", "--name", "t1", "--nodes", "2").code == 0
    record = StateDir("t1").load()
    config = load_config(None, record.config)
    provider = xc.provider_factory(config, lambda _m: None)
    provider.act_for(record.owner or "")
    shell.calls.clear()
    return CommandContext(config, StateDir("t1"), provider, Reporter(fancy=False), shell.factory), record


@pytest.fixture
def listening() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def took_nothing(ctx: CommandContext, record: ClusterRecord, shell, ec2, before: int) -> None:
    storage = ctx.provider.open_storage(record.storage)
    assert LeaseBook(storage, "t1", spec_for("aws").instance_id).current() is None
    assert not [c for c in shell.calls if "pkill" in c.command]
    assert sum(len(r["Instances"]) for r in ec2.describe_instances()["Reservations"]) == before


def test_a_late_beat_from_a_running_master_takes_nothing_from_it(worker_side, shell, ec2, capsys):
    ctx, record = worker_side
    ctx.reporter = Reporter(fancy=False)  # on this test's stderr
    before = sum(len(r["Instances"]) for r in ec2.describe_instances()["Reservations"])

    code = Takeover(ctx, record, record.node("node1"), ctx.provider.open_storage(record.storage)).run(ctx.shell())

    assert code == 0 and "the master runs" in capsys.readouterr().err
    took_nothing(ctx, record, shell, ec2, before)


def test_a_master_the_provider_does_not_list_but_that_answers_is_not_replaced(worker_side, shell, ec2, capsys,
                                                                              listening, monkeypatch):
    """The provider's word alone does not end a run: a master whose sshd answers is alive."""
    ctx, record = worker_side
    ctx.reporter = Reporter(fancy=False)  # on this test's stderr
    before = sum(len(r["Instances"]) for r in ec2.describe_instances()["Reservations"])
    master, worker = record.node_list()
    record.set_nodes([dataclasses.replace(master, id="i-0123456789abcdef0", ssh_host="127.0.0.1"), worker])
    monkeypatch.setattr(ctx, "identity", lambda: dataclasses.replace(CommandContext.identity(ctx), port=listening))

    code = Takeover(ctx, record, worker, ctx.provider.open_storage(record.storage)).run(ctx.shell())

    assert code == 0 and "still answers on its ssh port" in capsys.readouterr().err
    took_nothing(ctx, record, shell, ec2, before)
