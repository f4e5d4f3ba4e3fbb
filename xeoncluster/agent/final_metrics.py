"""metrics.json as a run leaves it: what its ranks wrote, with what only the agent knows (the restarts,
the steps they lost, the cost). The agent writes it into the master's run folder before the record says
the run ended and before it stores the results, so the copy in storage and the one `train` and `logs`
fetch into the results folder are the same file, byte for byte."""
from __future__ import annotations

import json
from typing import Any

from xeoncluster.core.errors import RemoteError
from xeoncluster.providers.base import Node
from xeoncluster.remote.command import quietly, remote_command
from xeoncluster.remote.shell import NodeShell, RemoteFile
from xeoncluster.runs.record import RunRecord
from xeoncluster.wire.run_outputs import FINAL_METRICS_TMP

METRICS = "metrics.json"


def run_metrics(record: RunRecord) -> dict[str, Any]:
    """The keys the run adds to metrics.json (docs/spot.md names them)."""
    return {"restarts": [r.model_dump() for r in record.restarts], "lost_steps": record.lost_steps,
            "cost_usd": round(record.cost_usd, 6)}


def with_run_metrics(text: str, record: RunRecord) -> str | None:
    """The ranks' metrics.json with the run's keys (theirs replaced); None when it holds no JSON object."""
    try:
        metrics = json.loads(text)
    except ValueError:
        return None
    if not isinstance(metrics, dict):
        return None
    return json.dumps(metrics | run_metrics(record), indent=2) + "\n"


def write_final_metrics(shell: NodeShell, master: Node, run_dir: str, record: RunRecord) -> bool:
    """RUN_DIR/metrics.json on the master with the run's keys; False when the run wrote none (it
    failed early) or not an object. Written beside it and renamed over it: no reader sees half of it."""
    path = f"{run_dir}/{METRICS}"
    text = shell.run([master], quietly(remote_command("cat", "--", path)))[master.name].stdout
    final = with_run_metrics(text, record) if text.strip() else None
    if final is None:
        return False
    written = f"{run_dir}/{FINAL_METRICS_TMP}"
    shell.put_files(master, [RemoteFile(written, final)])
    moved = shell.run([master], remote_command("mv", "-f", "--", written, path))[master.name]
    if not moved.ok:
        raise RemoteError(f"cannot write {path} on {master.name}: {moved.last_line()}")
    return True
