"""The CLI's side of the run agent: which host it lives on, installing and starting it, and reading
the runs it keeps (their records, whether their agent is alive), asking one to cancel."""
from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import replace

from pydantic import ValidationError

from xeoncluster.cluster import untrusted
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.core.errors import RemoteError, TrainingError, XeonClusterError
from xeoncluster.core.paths import master_files, package_dir
from xeoncluster.providers.abilities import AgentOnMaster
from xeoncluster.providers.base import Node
from xeoncluster.providers.registry import spec_for
from xeoncluster.remote.command import HomePath, all_of, remote_command
from xeoncluster.remote.package_sync import sync_tree, tree_digest
from xeoncluster.remote.shell import NodeShell, RemoteFile
from xeoncluster.runs.host import AgentHost, LocalHost, MasterHost
from xeoncluster.runs.queue_order import line_up
from xeoncluster.runs.record import RunRecord, RunState
from xeoncluster.runs.record_checks import checked, not_a_record
from xeoncluster.runs.submission import Submission
from xeoncluster.wire.contract import AGENT_MODULES, VERSION, AgentVersion, is_agent, older_agent_line
from xeoncluster.wire.layout import AGENT_HOME, APP, VERSION_FILE, AgentLayout, RunFolder

RECORD_SEPARATOR = "\x1e"
START_TIMEOUT = 60.0


def host_for(ctx: CommandContext, shell: NodeShell, record: ClusterRecord, warn: bool = False) -> AgentHost:
    """The agent's host; `warn`: say in one line when the agent there is older than this CLI."""
    if not isinstance(ctx.provider, AgentOnMaster):
        return LocalHost(str(ctx.state.home), sys.executable)
    master = record.node_list()[0]
    probe = shell.run([master], f"echo $HOME; cat {VERSION_FILE} 2>/dev/null || true")[master.name]
    if not probe.ok:
        raise RemoteError(f"cannot reach {master.name} (master), where the run agent lives: {probe.last_line()}",
                          hint=f"`xeoncluster status --name {ctx.config.name}` shows which nodes answer")
    home, _, version = probe.stdout.partition("\n")
    found = AgentVersion.parse(version).version
    if warn and found < VERSION:
        ctx.reporter.warn(older_agent_line(ctx.config.name, found))
    return MasterHost(shell, master, home.strip(), app=app_digest(), inherit=spec_for(ctx.config.provider).agent_env,
                      agent_version=found)


def app_digest() -> str:
    return tree_digest(package_dir().parent, master_files())


def run_folder(host: AgentHost, cluster: str, run: str) -> RunFolder:
    return AgentLayout(host.home).run(cluster, run)


def install(ctx: CommandContext, shell: NodeShell, host: AgentHost, record: ClusterRecord) -> None:
    """On the master: the agent's code (synced by digest) and its own view of the cluster. Nodes are
    reached there over their private addresses, with the user's profile meaning nothing."""
    if not isinstance(host, MasterHost):
        return
    sync_tree(shell, [host.master], package_dir().parent, master_files(), f"{APP.split('/', 1)[1]}/{host.app}")
    view = record.model_copy(deep=True)
    view.set_nodes([_private(n) for n in record.node_list()])
    view.config = {**record.config, "profile": None, "ssh": {**record.config.get("ssh", {}), "address": "private"}}
    folder = AgentLayout(AGENT_HOME).cluster(record.name)
    shell.run([host.master], all_of(remote_command("mkdir", "-p", HomePath(f"{folder}/runs")),
                                    remote_command("chmod", "700", HomePath(AGENT_HOME))))
    shell.put_files(host.master, [
        RemoteFile(f"{folder}/state.json", view.model_dump_json(indent=2), 0o600),
        RemoteFile(f"{folder}/known_hosts", ctx.state.known_hosts.read_text(), 0o600),
        RemoteFile(f"{folder}/id_ed25519", ctx.state.key.read_text(), 0o600),
        RemoteFile(VERSION_FILE, AgentVersion(version=VERSION, app=host.app).model_dump_json(), 0o644),
    ])
    host.agent_version = VERSION


def _private(node: Node) -> Node:
    return replace(node, ssh_host=node.private_ip)


def submit(host: AgentHost, cluster: str, submission: Submission, record: RunRecord) -> None:
    folder = run_folder(host, cluster, record.run)
    result = host.run(f"mkdir -p {shlex.quote(folder.path)} && rm -f {shlex.quote(folder.file(folder.CANCEL))}")
    if not result.ok:
        raise RemoteError(f"cannot write the run's folder on {host.name}: {result.last_line()}",
                          hint="is the master's disk full? `xeoncluster exec --node node0 -- df -h ~`")
    log = folder.file(folder.LOG)
    record.log = log if isinstance(host, LocalHost) else f"{host.name.split()[0]}:{log}"
    host.write(folder.file(folder.ENV), submission.env_json(), 0o600)
    host.write(folder.file(folder.REQUEST), submission.to_json())
    host.write(folder.file(folder.RECORD), record.model_dump_json(indent=2))


def start(host: AgentHost, cluster: str, run: str) -> RunRecord:
    """Start the agent and wait until it has taken the run; its own failure is one line, with its log."""
    folder = run_folder(host, cluster, run)
    log = folder.file(folder.AGENT_LOG)
    host.start(f"xeoncluster-run-{cluster}-{run}", ["run", cluster, run], log)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        record = read_record(host, cluster, run)
        if record is not None and record.state is not RunState.SUBMITTED:
            return record
        time.sleep(0.5)
    last = host.run(f"tail -n 1 {shlex.quote(log)} 2>/dev/null").stdout.strip()
    raise TrainingError(f"the run agent on {host.name} did not start run {run}" + (f": {last}" if last else ""),
                        hint=f"its log is {log} on {host.name}")


def read_record(host: AgentHost, cluster: str, run: str) -> RunRecord | None:
    result = host.run(f"cat {shlex.quote(run_folder(host, cluster, run).file(RunFolder.RECORD))} 2>/dev/null")
    if not result.ok:
        return None
    try:
        record = RunRecord.model_validate_json(result.stdout)
    except ValueError:
        return None
    untrusted.same_run(record.run, run, f"the run record on {host.name}")
    return checked(record, f"the run record on {host.name}")


def list_records(host: AgentHost, cluster: str, warn: Callable[[str], None] | None = None) -> list[RunRecord]:
    """Every run of the cluster on its agent's host, newest first. A record that is not one, or fails a
    check, is left out, and `warn` (the CLI's) hears one line naming it: one record the master forged
    must not hide the others."""
    folder = shlex.quote(AgentLayout(host.home).runs(cluster))
    result = host.run(f"for f in {folder}/*/{RunFolder.RECORD}; do "
                      "[ -f \"$f\" ] && printf '%s\\n' \"$f\" && cat \"$f\" && printf '\\036'; done; true")
    records = []
    for chunk in result.stdout.split(RECORD_SEPARATOR):
        path, _, text = chunk.partition("\n")
        if not path.strip():
            continue
        try:
            records.append(listed_record(path, text, host.name))
        except untrusted.Refused as exc:
            if warn is not None:
                warn(f"{exc.message}; left out")
    return sorted(records, key=lambda r: r.submitted_at, reverse=True)


def listed_record(path: str, text: str, host: str) -> RunRecord:
    """One run.json of the listing: a run record, of the run its folder names."""
    folder = path.rsplit("/", 2)[-2] if path.count("/") >= 2 else ""
    source = f"the run record {path[-120:]!r} on {host}"
    try:
        record = RunRecord.model_validate_json(text)
    except ValidationError as exc:
        raise untrusted.refused(source, "a record", text[:40], not_a_record(exc)) from None
    untrusted.same_run(record.run, folder, source)
    return checked(record, source)


def agent_alive(host: AgentHost, record: RunRecord) -> bool:
    if record.agent_pid is None:
        return record.state is RunState.SUBMITTED
    pid = int(record.agent_pid)
    check = f"{is_agent(pid)} && echo alive"
    return "alive" in host.run(check).stdout


def line(host: AgentHost, cluster: str) -> list[RunRecord]:
    """The runs still to end whose agents are alive: the started one, then the queue in order."""
    return line_up(list_records(host, cluster), lambda record: agent_alive(host, record))


def active_run(host: AgentHost, cluster: str) -> RunRecord | None:
    """The started run whose agent is still at work on the cluster, if any."""
    for record in list_records(host, cluster):
        if not record.state.finished and not record.waiting and agent_alive(host, record):
            return record
    return None


def request_cancel(host: AgentHost, cluster: str, run: str) -> None:
    folder = run_folder(host, cluster, run)
    result = host.run(f"touch {shlex.quote(folder.file(folder.CANCEL))}")
    if not result.ok:
        raise XeonClusterError(f"could not ask the agent on {host.name} to cancel run {run}: {result.last_line()}")


def launch_json(host: AgentHost, cluster: str, run: str) -> dict[str, object]:
    result = host.run(f"cat {shlex.quote(run_folder(host, cluster, run).file(RunFolder.LAUNCH))} 2>/dev/null")
    try:
        data = json.loads(result.stdout) if result.ok else {}
    except ValueError:
        data = {}
    return data if isinstance(data, dict) else {}


def active_or_none(ctx: CommandContext, record: ClusterRecord) -> RunRecord | None:
    """The active run, when the agent's host can be asked; a master that does not answer runs nothing."""
    pending = line_or_empty(ctx, record)
    return pending[0] if pending and not pending[0].waiting else None


def line_or_empty(ctx: CommandContext, record: ClusterRecord) -> list[RunRecord]:
    """The active run and the queue, when the agent's host can be asked; a master that does not
    answer runs nothing."""
    shell = ctx.shell()
    try:
        return line(host_for(ctx, shell, record), ctx.config.name)
    except XeonClusterError:
        return []
    finally:
        shell.close()


def stop_local_agents(home: str, cluster: str, spare: int | None = None) -> list[int]:
    """This machine's agents of the cluster (local nodes): what `down` must not leave running. `spare`:
    the watch agent that removes its idle cluster itself."""
    import os
    import signal
    from pathlib import Path

    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == spare:
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        ours = f"XEONCLUSTER_HOME={home}".encode() in environ
        if ours and any(m.encode() in argv for m in AGENT_MODULES) and cluster.encode() in argv:
            os.kill(int(proc.name), signal.SIGKILL)
            pids.append(int(proc.name))
    return pids
