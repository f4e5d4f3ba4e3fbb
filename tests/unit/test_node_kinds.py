"""Node roles, markets and states as values: their predicates, the record's master, nodes by index, and the
strings every wire format holds, unchanged."""
from __future__ import annotations

import json

from xeoncluster.cluster.cluster_files import hostfile
from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.providers.base import Node
from xeoncluster.providers.node_kinds import Market, NodeState, Role, by_index, master_of


def node(index: int, role: Role = Role.WORKER, state: NodeState = NodeState.RUNNING) -> Node:
    return Node(f"node{index}", f"i-{index}", f"10.0.0.{index + 2}", f"10.0.0.{index + 2}", role, Market.SPOT,
                state=state)


def test_states_say_whether_the_machine_lives() -> None:
    assert [s for s in NodeState if s.is_live()] == [NodeState.PENDING, NodeState.RUNNING, NodeState.STOPPING,
                                                    NodeState.STOPPED]
    assert [s for s in NodeState if s.is_terminal()] == [NodeState.SHUTTING_DOWN, NodeState.TERMINATED]
    assert [s for s in NodeState if s.is_running()] == [NodeState.RUNNING]
    assert not NodeState.UNKNOWN.is_live() and not NodeState.UNKNOWN.is_terminal()


def test_the_values_are_the_wire_strings() -> None:
    assert [str(r) for r in Role] == ["master", "worker"]
    assert [m.value for m in Market] == ["spot", "on-demand", ""]
    assert f"{Role.MASTER:7}|" == "master |" and json.dumps([Market.ON_DEMAND]) == '["on-demand"]'


def test_a_node_built_from_strings_holds_the_enums() -> None:
    built = Node("node0", "i-0", "10.0.0.2", "10.0.0.2", "master", "on-demand", state="stopped")  # type: ignore[arg-type]
    assert built.role is Role.MASTER and built.market is Market.ON_DEMAND and built.state is NodeState.STOPPED
    assert built.is_master


def test_an_old_state_file_loads_and_writes_back_the_same_strings() -> None:
    raw = {"name": "t1", "provider": "aws", "nodes": [
        {"name": "node0", "id": "i-0", "private_ip": "10.0.0.2", "ssh_host": "1.2.3.4", "role": "master",
         "market": "on-demand", "state": "running"},
        {"name": "node1", "id": "i-1", "private_ip": "10.0.0.3", "ssh_host": "1.2.3.5", "role": "worker",
         "market": "spot", "state": "shutting-down"}]}
    record = ClusterRecord.model_validate_json(json.dumps(raw))
    assert [n.role for n in record.nodes] == [Role.MASTER, Role.WORKER]
    assert record.nodes[1].state is NodeState.SHUTTING_DOWN and record.nodes[1].market is Market.SPOT
    written = json.loads(record.model_dump_json())["nodes"]
    assert [(n["role"], n["market"], n["state"]) for n in written] == [
        ("master", "on-demand", "running"), ("worker", "spot", "shutting-down")]


def test_the_record_names_its_master() -> None:
    record = ClusterRecord(name="t1", provider="local", nodes=[node(1), node(0, Role.MASTER), node(2)])
    assert record.master is not None and record.master.name == "node0"
    assert ClusterRecord(name="t1", provider="local", nodes=[node(1)]).master is None
    assert master_of([node(3), node(5, Role.MASTER)]) == node(5, Role.MASTER)


def test_nodes_are_ordered_by_index_not_by_name() -> None:
    nodes = [node(10), node(9), node(2), node(0, Role.MASTER)]
    assert [n.index for n in nodes] == [10, 9, 2, 0]
    assert [n.name for n in by_index(nodes)] == ["node0", "node2", "node9", "node10"]
    assert hostfile(nodes).split() == ["node0", "node2", "node9", "node10"]
