"""The agent's folder, kept on every worker, so that a worker can take the master's place (agent/takeover.py).

At every heartbeat the master's watch agent copies to each worker what a successor needs and storage does
not hold: the agent's code (by digest), the cluster's state as the agent sees it (nodes over their private
addresses, the pinned host keys, the cluster's key), the watch's settings, and each unfinished run's record,
request and --env values. A worker runs the user's code with the same login and the same role as the
master, so holding these widens nobody's reach. With the files goes the command the worker's orphan
watch runs to take over (node/orphan_watch.py).
"""
from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

from xeoncluster.cluster.autostop import SETTINGS
from xeoncluster.cluster.state import StateDir
from xeoncluster.core.paths import master_files, package_dir
from xeoncluster.node.orphan_watch import TAKEOVER
from xeoncluster.providers.node_kinds import Node
from xeoncluster.remote.command import HomePath, all_of, remote_command
from xeoncluster.remote.package_sync import sync_tree, tree_digest
from xeoncluster.remote.shell import NodeShell, RemoteFile
from xeoncluster.runs.record import RunRecord
from xeoncluster.wire.contract import AGENT_MODULE
from xeoncluster.wire.layout import AGENT_HOME, APP, PACKAGE_ROOT, RunFolder

CLUSTER_FILES = ("state.json", "known_hosts", "id_ed25519", SETTINGS)
RUN_FILES = (RunFolder.RECORD, RunFolder.REQUEST, RunFolder.ENV)
ORPHAN_FOLDER = f"{PACKAGE_ROOT}/orphan"


def unfinished_runs(state: StateDir) -> Iterator[Path]:
    for record in sorted(state.runs.glob(f"*/{RunFolder.RECORD}")):
        try:
            if not RunRecord.model_validate_json(record.read_text()).state.finished:
                yield record.parent
        except (OSError, ValueError):
            continue


def replica_files(state: StateDir) -> list[RemoteFile]:
    """Paths relative to the worker's login home, where its own agent home is the master's."""
    base = f"{AGENT_HOME}/clusters/{state.name}"
    files = [RemoteFile(f"{base}/{name}", (state.path / name).read_text(), 0o600)
             for name in CLUSTER_FILES if (state.path / name).is_file()]
    for folder in unfinished_runs(state):
        files += [RemoteFile(f"{base}/runs/{folder.name}/{name}", (folder / name).read_text(), 0o600)
                  for name in RUN_FILES if (folder / name).is_file()]
    return files


def takeover_argv(cluster: str, node: str, app: str) -> list[str]:
    """Absolute paths: the worker's login home is the master's (one image, one user)."""
    home = Path.home()
    return ["env", f"PYTHONPATH={home}/{APP}/{app}", f"XEONCLUSTER_HOME={home}/{AGENT_HOME}",
            sys.executable, "-m", AGENT_MODULE, "takeover", cluster, node]


class Replica:
    def __init__(self, shell: NodeShell, state: StateDir) -> None:
        self.shell, self.state = shell, state

    def copy(self, workers: list[Node]) -> list[str]:
        """To every worker; the names of those it did not reach."""
        if not workers:
            return []
        root = package_dir().parent
        app = tree_digest(root, master_files())
        sync_tree(self.shell, workers, root, master_files(), f"{APP.split('/', 1)[1]}/{app}")
        files = replica_files(self.state)
        folders = sorted({f.path.rsplit("/", 1)[0] for f in files} | {ORPHAN_FOLDER})
        made = self.shell.run(workers, all_of(*(remote_command("mkdir", "-p", HomePath(f)) for f in folders),
                                              remote_command("chmod", "700", HomePath(AGENT_HOME))))
        missed = [name for name, result in made.items() if not result.ok]
        for node in (n for n in workers if n.name not in missed):
            argv = takeover_argv(self.state.name, node.name, app)
            try:
                self.shell.put_files(node, [*files, RemoteFile(f"{ORPHAN_FOLDER}/{TAKEOVER}",
                                                               json.dumps({"argv": argv}), 0o600)])
            except Exception:  # noqa: BLE001 - one worker out of reach must not spare the others their copy
                missed.append(node.name)
        return sorted(missed)
