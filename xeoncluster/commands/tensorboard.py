"""`xeoncluster tensorboard [RUN|SWEEP]...`: the runs' TensorBoard files, brought here and served by
TensorBoard on a free port of this machine's loopback.

The files come from the master while the cluster is up (the ranks' scalars from the run's folder, the
nodes' use from the agent's) and are fetched again every REFRESH_SECONDS while a run is active; once
the cluster is gone they come from storage. Each run is one TensorBoard run, named after it.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.commands import runs as runs_cmd
from xeoncluster.commands.compare import chosen
from xeoncluster.commands.storage.stored_runs import fetch_stored_results
from xeoncluster.commands.train.train_results import fetch_packed, results_dir
from xeoncluster.core.errors import ConfigError, XeonClusterError
from xeoncluster.node.events.trackers import TENSORBOARD_DIR
from xeoncluster.providers.base import Node
from xeoncluster.remote.command import remote_command
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs import client
from xeoncluster.runs.host import LocalHost
from xeoncluster.runs.record import RunRecord
from xeoncluster.wire.layout import PACKAGE_ROOT, RunFolder

REFRESH_SECONDS = 30.0
INSTALL_HINT = "pip install 'xeoncluster[tensorboard]'"


@dataclass(frozen=True)
class Board:
    runs: dict[str, Path]  # run name -> the folder of its event files here

    def logdir_spec(self) -> str:
        return ",".join(f"{run}:{folder}" for run, folder in self.runs.items())


def check_installed() -> None:
    if importlib.util.find_spec("tensorboard") is None:
        raise ConfigError("TensorBoard is not installed on this machine", hint=f"install it with `{INSTALL_HINT}`")


def gather(ctx: CommandContext, names: tuple[str, ...]) -> Board:
    """The named runs' files here (default: the newest run)."""
    records = runs_cmd.list_runs(ctx).records
    if not records:
        raise ConfigError(f"cluster '{ctx.config.name}' has no run yet",
                          hint=f"start one with `xeoncluster train squad --name {ctx.config.name}`")
    picked = chosen(records, names, ctx.config.name) if names else records[:1]
    return Board({r.run: refresh(ctx, r) for r in picked})


def refresh_active(ctx: CommandContext, board: Board) -> bool:
    """Fetch again the files of the board's runs that are still active; whether any was."""
    current = {r.run: r for r in runs_cmd.list_runs(ctx).records}
    active = [current[run] for run in board.runs if run in current and not current[run].state.finished]
    for record in active:
        refresh(ctx, record)
    return bool(active)


def refresh(ctx: CommandContext, record: RunRecord) -> Path:
    target = results_dir(ctx, record.run) / TENSORBOARD_DIR
    target.mkdir(parents=True, exist_ok=True)
    try:
        if runs_cmd.cluster_is_up(ctx):
            _from_cluster(ctx, record.run, target)
        else:
            fetch_stored_results(ctx, record.run)
    except XeonClusterError as exc:
        ctx.reporter.warn(f"run {record.run}: its TensorBoard files could not all be fetched ({exc.one_line()})")
    return target


def _from_cluster(ctx: CommandContext, run: str, target: Path) -> None:
    cluster = ctx.require_up(ready=False)
    master = cluster.node_list()[0]
    shell = ctx.shell()
    try:
        host = client.host_for(ctx, shell, cluster)
        staging = target / ".fetched"
        _fetch_folder(shell, master, f"{PACKAGE_ROOT}/runs/{run}", TENSORBOARD_DIR, staging / "ranks")
        left_out = _merge(staging / "ranks" / TENSORBOARD_DIR, target / "ranks")
        nodes = client.run_folder(host, ctx.config.name, run).file(RunFolder.TENSORBOARD)
        if isinstance(host, LocalHost):
            left_out += _merge(Path(nodes), target / "nodes")
        else:
            _fetch_folder(shell, master, nodes.rsplit("/", 1)[0], RunFolder.TENSORBOARD, staging / "nodes")
            left_out += _merge(staging / "nodes" / RunFolder.TENSORBOARD, target / "nodes")
        shutil.rmtree(staging, ignore_errors=True)
        if left_out:
            ctx.reporter.warn(f"run {run}: left out of TensorBoard, links or neither file nor folder: "
                              f"{', '.join(repr(name) for name in left_out)}")
    finally:
        shell.close()


def _merge(source: Path, target: Path, below: str = "") -> list[str]:
    """Copy `source`'s files and folders into `target`, over older copies; what else it holds (links,
    above all) is left out and its names returned. Event folders hold no links, and following them
    copied the folder into itself: two links to it made 2^40 copies to come."""
    if not source.is_dir():
        return []
    target.mkdir(parents=True, exist_ok=True)
    left_out = []
    with os.scandir(source) as entries:
        for entry in entries:
            there, name = target / entry.name, f"{below}{entry.name}"
            if there.is_symlink():  # never made here: a copy must not write through it
                left_out.append(name)
            elif entry.is_dir(follow_symlinks=False):
                left_out += _merge(Path(entry.path), there, f"{name}/")
            elif entry.is_file(follow_symlinks=False):
                shutil.copy2(entry.path, there)
            else:
                left_out.append(name)
    return left_out


def _fetch_folder(shell: NodeShell, master: Node, parent: str, name: str, into: Path) -> None:
    """`parent/name` from the master into `into/name`, when it is there."""
    packed = f"{parent}/.xc-{name}.tar.gz"
    pack = (f"if [ -d {remote_command(f'{parent}/{name}')} ]; then "
            f"{remote_command('tar', '-C', parent, '-czf', packed, name)}; "
            f"else {remote_command('tar', '-czf', packed, '-T', '/dev/null')}; fi")
    into.mkdir(parents=True, exist_ok=True)
    fetch_packed(shell, master, pack, packed, f"the {name} folder", into / f".xc-{name}.tar.gz", into)
    shell.run([master], remote_command("rm", "-f", packed))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(board: Board, port: int, say: Callable[[str], None], again: Callable[[], bool]) -> int:
    """TensorBoard on 127.0.0.1:PORT until Ctrl-C; `again()` refreshes the files every REFRESH_SECONDS
    (it says whether to go on refreshing)."""
    argv = [sys.executable, "-m", "tensorboard.main", "--logdir_spec", board.logdir_spec(), "--host", "127.0.0.1",
            "--port", str(port), "--reload_interval", "15"]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    say(f"TensorBoard for {', '.join(board.runs)}: http://127.0.0.1:{port}/ (Ctrl-C stops it)")
    refreshing, next_refresh = True, time.monotonic() + REFRESH_SECONDS
    try:
        while process.poll() is None:
            time.sleep(0.5)
            if refreshing and time.monotonic() >= next_refresh:
                refreshing, next_refresh = again(), time.monotonic() + REFRESH_SECONDS
    except KeyboardInterrupt:
        pass
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=15)
    if process.returncode not in (0, -15, None) and process.stderr is not None:
        tail = process.stderr.read().strip().splitlines()[-1:] or ["no output"]
        raise XeonClusterError(f"TensorBoard ended with exit code {process.returncode}: {tail[0]}")
    return 0
