"""Fetching what a run left on the master: metrics.json, the optional result files, and the model."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xeoncluster.cluster import untrusted
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.core.errors import RemoteError
from xeoncluster.providers.base import Node
from xeoncluster.remote.command import all_of, quietly, remote_command
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs.archive import HARD_LINKS_AS_FILES, unpack
from xeoncluster.wire.layout import PACKAGE_ROOT
from xeoncluster.wire.run_outputs import TASK_RESULTS, tar_excludes

OPTIONAL_RESULTS = TASK_RESULTS[1:]  # what a built-in task leaves next to metrics.json


def results_dir(ctx: CommandContext, run: str) -> Path:
    """Outside the cluster's folder: `down` removes that, and results must outlive the cluster. The run's
    name may come from the master or storage: it must be a run name, and the folder stay under the root."""
    return untrusted.under(ctx.state.home / "results", Path(ctx.config.name) / untrusted.run_name(run, "a run record"))


@dataclass
class Fetched:
    metrics: dict[str, Any]
    metrics_path: Path
    results: list[Path] = field(default_factory=list)
    model_dir: Path | None = None


def fetch_results(shell: NodeShell, master: Node, run: str, run_dir: Path, fetch_model: Path | None,
                  everything: bool = False) -> Fetched:
    """Copy the run's results into `run_dir`, metrics.json as the agent left it (with the restarts and
    cost: the same file storage keeps). `everything` (a user's script): the whole output folder, but
    for its checkpoints."""
    remote_run = f"{PACKAGE_ROOT}/runs/{run}"
    metrics_path = run_dir / "metrics.json"
    fetch = _fetch_outputs if everything else _fetch_optional
    results = fetch(shell, master, remote_run, run_dir)
    shell.get(master, f"{remote_run}/metrics.json", metrics_path)
    metrics = untrusted.metrics_of(metrics_path, f"run {run}'s results on {master.name}")
    fetched = Fetched(metrics, metrics_path, [p for p in results if p != metrics_path])
    if fetch_model is not None:
        fetched.model_dir = _fetch_model(shell, master, remote_run, run_dir, fetch_model)
    return fetched


def _fetch_model(shell: NodeShell, master: Node, remote_run: str, run_dir: Path, target: Path) -> Path:
    packed = f"{remote_run}/model.tar.gz"
    target.mkdir(parents=True, exist_ok=True)
    pack = remote_command("tar", "-C", remote_run, "-czf", packed, HARD_LINKS_AS_FILES, "model")
    fetch_packed(shell, master, pack, packed, "the model", run_dir / "model.tar.gz", target)
    return target / "model"


def fetch_packed(shell: NodeShell, master: Node, pack: str, packed: str, what: str, archive: Path,
                  target: Path) -> list[str]:
    """Run `pack` on the master, bring its archive `packed` back and unpack it into `target` by
    runs/archive's rule; the files it held, as checked names below `target`."""
    result = shell.run([master], pack)[master.name]
    if not result.ok:
        raise RemoteError(f"could not pack {what} on {master.name}: {result.last_line()}")
    shell.get(master, packed, archive)
    try:
        return unpack(archive, target, f"{what} from {master.name}")
    finally:
        archive.unlink(missing_ok=True)


def _fetch_optional(shell: NodeShell, master: Node, remote_run: str, run_dir: Path) -> list[Path]:
    """Fetch those of OPTIONAL_RESULTS the run wrote; a missing one (no evaluation set) is no failure."""
    listing = shell.run([master], quietly(all_of(remote_command("cd", remote_run),
                                                 remote_command("ls", "-1", "--", *OPTIONAL_RESULTS))))
    present = set(listing[master.name].stdout.split())
    fetched = []
    for name in (n for n in OPTIONAL_RESULTS if n in present):
        shell.get(master, f"{remote_run}/{name}", run_dir / name)
        fetched.append(run_dir / name)
    return fetched


def _fetch_outputs(shell: NodeShell, master: Node, remote_run: str, run_dir: Path) -> list[Path]:
    packed = f"{remote_run}.xc-results.tar.gz"  # beside the folder: storage may be snapshotting inside it
    # Exit 1 is GNU tar's "file changed as we read it": the agent's storage snapshot links and unlinks
    # its own files in the folder meanwhile, never the script's output.
    pack = remote_command("tar", "-C", remote_run, "-czf", packed, "--warning=no-file-changed", HARD_LINKS_AS_FILES,
                          *tar_excludes(), ".")
    names = fetch_packed(shell, master, f"{pack} || [ $? -eq 1 ]", packed, "the run's output",
                          run_dir / ".xc-results.tar.gz", run_dir)
    shell.run([master], remote_command("rm", "-f", packed))
    return sorted(run_dir / name for name in names)
