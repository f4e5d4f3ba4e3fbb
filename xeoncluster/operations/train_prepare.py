"""What a launch needs, on the nodes the cluster has now: their topology, the training package and
data synced to every node, the launch plan, and the --env file. The CLI prepares the first launch;
the run agent prepares every resumed one the same way (a replacement node gets what it lacks).
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.core.errors import RemoteError
from xeoncluster.core.paths import node_files, package_dir
from xeoncluster.core.stacks import Stack
from xeoncluster.job.train_plan import (
    ENV_FILE,
    LaunchPlan,
    Site,
    build_plan,
    check_request,
    env_file_text,
    launch_env,
    program_args,
)
from xeoncluster.job.train_request import AnyRequest, ScriptRequest, TaskRequest
from xeoncluster.operations.script_prepare import sync_script
from xeoncluster.operations.up_nodes import master_ssh_files
from xeoncluster.providers.base import Node
from xeoncluster.remote.command import HomePath, all_of, remote_command, word
from xeoncluster.remote.package_sync import sync_data_file, sync_tree
from xeoncluster.remote.shell import CommandResult, NodeShell, RemoteFile
from xeoncluster.topology import CpuTopology, parse_probe, probe_command
from xeoncluster.wire.layout import NODE_LIB, NODE_MODULE, PACKAGE_ROOT, VENV, RemoteLayout

# The interface each node reaches the master's private address over (on the master: the one holding it).
IFACE_PROBE = ("dev=$(ip -o -4 route get {ip} 2>/dev/null | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p'); "
               "if [ \"$dev\" = lo ]; then dev=$(ip -o -4 addr show to {ip} 2>/dev/null | awk '{{print $2}}'); fi; "
               "echo iface=$dev")


@dataclass(frozen=True)
class Probed:
    topology: CpuTopology
    home: str
    iface: str | None


class Preparer:
    def __init__(self, ctx: CommandContext, request: AnyRequest, stack: Stack, nodes: list[Node]) -> None:
        self.ctx, self.request, self.stack, self.nodes = ctx, request, stack, nodes

    def prepare(self, shell: NodeShell, run: str, sync: bool = True) -> LaunchPlan:
        check_request(self.request, self.stack)
        reporter = self.ctx.reporter
        with reporter.step(f"read topology of {len(self.nodes)} node(s)"):
            probed = self.probe(shell)
            reporter.detail(probed.topology.describe()
                            + (f"; nodes reach the master over {probed.iface}" if probed.iface else ""))
        data: dict[str, str] = {}
        if sync:
            with reporter.step("sync the training package and data"):
                data = self.sync(shell, self.nodes)
        site = Site(probed.iface, self.ctx.provider.notice_source, self.ctx.config.name)
        return build_plan(self.request, self.stack, self.nodes, probed.topology, probed.home, run, data, site)

    def probe(self, shell: NodeShell) -> Probed:
        # The venv argument stays outside the quoting so that the node's shell expands $HOME.
        command = (f'echo home=$HOME; {probe_command()} "$HOME/{VENV}"; '
                   f"{IFACE_PROBE.format(ip=shlex.quote(self.nodes[0].private_ip))}")
        results = shell.run(self.nodes, command)
        failed = [r for r in results.values() if not r.ok]
        if failed:
            raise RemoteError(f"cannot read the CPU topology of {failed[0].node}: {failed[0].last_line()}")
        topologies = {name: parse_probe(r.stdout) for name, r in results.items()}
        homes = {line.split("=", 1)[1] for r in results.values() for line in r.stdout.splitlines()
                 if line.startswith("home=")}
        if len(homes) != 1:
            raise RemoteError(f"nodes disagree on the home directory ({', '.join(sorted(homes))}); "
                              "MPI needs the venv at the same path everywhere")
        master = topologies[self.nodes[0].name]
        differing = sorted(n for n, t in topologies.items() if t != master)
        if differing:
            self.ctx.reporter.warn(f"{', '.join(differing)} differ from node0's topology; planning for node0")
        return Probed(master, homes.pop(), self._common_iface(results))

    def _common_iface(self, results: dict[str, CommandResult]) -> str | None:
        found = {name: value for name, r in results.items() for line in r.stdout.splitlines()
                 if line.startswith("iface=") for value in [line.split("=", 1)[1].strip()]}
        names = set(found.values())
        if len(names) == 1 and "" not in names:
            return names.pop()
        seen = ", ".join(f"{name}={value or '?'}" for name, value in sorted(found.items()))
        self.ctx.reporter.warn(f"nodes reach the master over different or unknown interfaces ({seen}); "
                               "GLOO_SOCKET_IFNAME is left to gloo")
        return None

    def sync(self, shell: NodeShell, nodes: list[Node]) -> dict[str, str]:
        """The node package and the data files, to those of `nodes` that lack this content."""
        result = sync_tree(shell, nodes, package_dir().parent, node_files(), NODE_LIB.removeprefix(f"{PACKAGE_ROOT}/"))
        self.ctx.reporter.detail(f"node package {result.digest}: "
                                 f"sent to {', '.join(result.sent_to) or 'none (unchanged)'}")
        request = self.request
        if isinstance(request, ScriptRequest):
            sync_script(self.ctx, shell, nodes, request, self.stack)
            return {}
        data = {}
        if request.train_file:
            data["train"] = sync_data_file(shell, nodes, Path(request.train_file))
        if request.eval_file:
            data["eval"] = sync_data_file(shell, nodes, Path(request.eval_file))
        return data

    def warm(self, shell: NodeShell, node: Node, home: str, run: str, data_too: bool,
             launch: LaunchPlan | None = None) -> None:
        """Give a node that joins a running job what it would otherwise build on the critical path: the
        package and the data files; with `data_too` (the job still trains, so this is off the critical
        path), also what its rank builds from them, else (for --demo) the demo assets. With the running job's
        `launch`, that data work runs as an MPI rank of its own from the master, so that the node's warm
        server (node/warm_start) is up with the libraries imported when the next job's rank starts there."""
        data = self.sync(shell, [node])
        request = self.request
        if not isinstance(request, TaskRequest):
            return
        if data_too:
            self.send_env_file(shell, run)
            self._warm_data(shell, node, home, run, data, launch)
        elif request.demo:
            command = (f"cd ~/{PACKAGE_ROOT} && PYTHONPATH=~/{NODE_LIB} ~/{VENV}/bin/python -m {NODE_MODULE} "
                       f"demo-assets --out ~/{PACKAGE_ROOT}/demo")
            result = shell.run([node], command)[node.name]
            if not result.ok:
                raise RemoteError(f"could not build the demo assets on {node.name}: {result.last_line()}")

    def _warm_data(self, shell: NodeShell, node: Node, home: str, run: str, data: dict[str, str],
                   launch: LaunchPlan | None) -> None:
        """The rank's own command with --warm-data, alone on the node: the data, the model files and the
        features cache the resumed rank then loads (else every rank waits while it tokenizes)."""
        assert isinstance(self.request, TaskRequest)
        program = program_args(replace(self.request, resume=False), self.stack, home, run, data)
        # Right after the task: whatever the user's trainer arguments end with, the flag stays ours.
        program = [*program[:4], "--warm-data", *program[4:]]
        with self.ctx.reporter.step(f"prepare the data and features on {node.name}"):
            result = self._warm_rank(shell, node, program, launch) if launch is not None else None
            if result is None or not result.ok:
                if result is not None:
                    self.ctx.reporter.detail(f"{node.name}: no warm rank server ahead ({result.last_line()})")
                env = launch_env(self.request, self.stack, home, run)
                result = shell.run([node], remote_command("env", *(f"{k}={v}" for k, v in env.items()),
                                                          *program))[node.name]
        if not result.ok:  # the resumed rank builds them itself
            self.ctx.reporter.warn(f"could not prepare the data on {node.name} ahead: {result.last_line()}")

    def _warm_rank(self, shell: NodeShell, node: Node, program: list[str], launch: LaunchPlan) -> CommandResult:
        """`program` as a rank on `node`, started where that node's ranks will be started from: a worker's from
        the launch's master, whose ssh files then name it too; the master's successor (under its name) from
        itself, as it will start its own rank once it is the master, which then forks warm (the master's
        120 s notice paused a stand-in run 10.5 s against 18.9 s with its server started after the handover)."""
        master = launch.nodes[0]
        if node.name == master.name:
            launcher, reached = node, [node]
        else:
            launcher, reached = master, [*(n for n in launch.nodes if n.name != node.name), node]
        shell.put_files(launcher, master_ssh_files(self.ctx, reached))
        return shell.run([launcher], launch.warm_up(node.name, program))[launcher.name]

    def check_checkpoint(self, shell: NodeShell, home: str, run: str) -> bool | None:
        """Whether the master holds a checkpoint of `run` (else it may come from storage); None when it
        has no such run at all."""
        master = self.nodes[0]
        remote = RemoteLayout(home).run_dir(run)
        command = (f"cd {shlex.quote(remote)} 2>/dev/null || {{ echo no-run; exit 0; }}; "
                   "ls -d checkpoint-* 2>/dev/null || true")
        result = shell.run([master], command)[master.name]
        if not result.ok:
            raise RemoteError(f"cannot look for checkpoints on {master.name}: {result.last_line()}")
        found = result.stdout.split()
        if found == ["no-run"]:
            return None
        return any(line.startswith("checkpoint-") for line in found)

    def send_env_file(self, shell: NodeShell, run: str) -> None:
        """--env values go to every node in a file only the login user can read (created 0600 before
        anything is written to it), never into argv, launch.json or the log."""
        if not self.request.env:
            return
        remote_dir = f"{PACKAGE_ROOT}/runs/{run}"
        env_file = HomePath(f"{remote_dir}/{ENV_FILE}")
        results = shell.run(self.nodes, all_of("umask 077", remote_command("mkdir", "-p", HomePath(remote_dir)),
                                               f": > {word(env_file)}", remote_command("chmod", "600", env_file)))
        failed = [r for r in results.values() if not r.ok]
        if failed:
            raise RemoteError(f"cannot write the --env file on {failed[0].node}: {failed[0].last_line()}")
        for node in self.nodes:
            shell.put_files(node, [RemoteFile(f"{remote_dir}/{ENV_FILE}", env_file_text(self.request), 0o600)])
