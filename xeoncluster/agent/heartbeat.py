"""The watch agent's side of the nodes' dead-man switch (xeoncluster/node/orphan_watch.py): about once a
minute it touches a heartbeat on every node of the cluster, itself included, and starts the node's
orphan watch there when none runs (a replaced node gets one at its first beat). The watch is node code:
a node that has not had it yet (no `train` has shipped the node package there) gets the package first.
With each beat the workers get the agent's folder (agent/replica.py), from which one of them takes the
master's place when the beats stop."""
from __future__ import annotations

import shlex
from collections.abc import Callable

from xeoncluster.agent.replica import ORPHAN_FOLDER
from xeoncluster.agent.succession import Succession
from xeoncluster.cluster.autostop import AutoStop
from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.core.paths import node_files, package_dir
from xeoncluster.providers.node_kinds import Node
from xeoncluster.remote.package_sync import sync_tree
from xeoncluster.remote.shell import NodeShell
from xeoncluster.wire.layout import NODE_LIB, NODE_MODULE, PACKAGE_ROOT, VENV

BEAT_SECONDS = 60.0
FOLDER = ORPHAN_FOLDER  # under the login home of every node


def beat_command(minutes: float, poweroff: str) -> str:
    """Touch the heartbeat, say the minutes, and start the watch unless one holds its lock."""
    folder = f'"$HOME"/{FOLDER}'
    watch = (f'PYTHONPATH="$HOME"/{NODE_LIB} setsid -f "$HOME"/{VENV}/bin/python -m {NODE_MODULE}.orphan_watch '
             f"{folder} --poweroff {shlex.quote(poweroff)} </dev/null >>{folder}/watch.log 2>&1")
    return (f"mkdir -p {folder} && echo {float(minutes):g} > {folder}/minutes && touch {folder}/heartbeat && "
            f"{{ ! flock -n {folder}/orphan.lock true || {watch}; }}")


class Heartbeat:
    def __init__(self, load: Callable[[], ClusterRecord | None], shell: NodeShell, poweroff: str | None,
                 report: Callable[[str], None], succession: Succession | None = None) -> None:
        self.load, self.shell, self.poweroff, self.report = load, shell, poweroff, report
        self.succession = succession
        self.last = float("-inf")
        self.shipped: set[str] = set()  # ids of the nodes known to hold the node package

    def beat(self, settings: AutoStop, now: float) -> None:
        """At most once per BEAT_SECONDS; a node that does not answer is reported, never fatal. Raises
        Fenced once another node holds the master lease."""
        if not settings.orphan_minutes or self.poweroff is None or now - self.last < BEAT_SECONDS:
            return
        self.last = now
        record = self.load()
        nodes = record.node_list() if record else []
        if not nodes:
            return
        self.ship([node for node in nodes if node.id not in self.shipped])
        results = self.shell.run(nodes, beat_command(settings.orphan_minutes, self.poweroff))
        missed = sorted(name for name, result in results.items() if not result.ok)
        if missed:
            self.report(f"no heartbeat reached {', '.join(missed)}")
        if self.succession is not None:
            unreached = self.succession.keep(nodes, set(results) - set(missed), now)
            if unreached:
                self.report(f"the agent's folder did not reach {', '.join(unreached)}")

    def ship(self, nodes: list[Node]) -> None:
        """The node package where it is not yet (sync_tree sends it only to nodes that lack this digest)."""
        if nodes:
            sync_tree(self.shell, nodes, package_dir().parent, node_files(), NODE_LIB.removeprefix(f"{PACKAGE_ROOT}/"))
            self.shipped |= {node.id for node in nodes}
