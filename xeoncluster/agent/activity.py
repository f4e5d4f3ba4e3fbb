"""What keeps a cluster from being idle, as its watch agent sees it: an active or queued run, a command of this
machine's CLI holding the cluster (a `train` submitting, an `up`), or somebody logged in over SSH.
Nothing else counts: `exec`, the agents' own SSH commands and background work leave the clock running.
"""
from __future__ import annotations

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs import client
from xeoncluster.runs.host import AgentHost
from xeoncluster.runs.queue_order import busy_line

# An interactive login is an sshd session process with a terminal ("sshd: ubuntu@pts/0"; OpenSSH 9.8+
# names it sshd-session). Local nodes share this machine's processes, so only sessions in the node's
# own network namespace are its own; a process whose namespace can't be read (another user's, on a
# cloud node where every process is in the node's namespace) counts.
SESSIONS = (
    "me=$(readlink /proc/self/ns/net); n=0; "
    "for p in $(pgrep -f '^sshd(-session)?: [^ ]+@pts/'); do "
    "ns=$(readlink /proc/$p/ns/net 2>/dev/null); "
    "if [ -z \"$ns\" ] || [ \"$ns\" = \"$me\" ]; then n=$((n+1)); fi; done; echo $n"
)


class Activity:
    def __init__(self, ctx: CommandContext, host: AgentHost, shell: NodeShell) -> None:
        self.ctx, self.host, self.shell = ctx, host, shell

    def busy(self) -> str:
        """Why the cluster is not idle, or "" when it is."""
        pending = client.line(self.host, self.ctx.config.name)
        if pending:  # the idle clock counts only once the queue is empty too
            return busy_line(pending)
        holder = self.ctx.state.holder()
        if holder is not None:
            return f"{holder} holds the cluster"
        return self.sessions()

    def sessions(self) -> str:
        record = self.ctx.state.load()
        nodes = record.node_list() if record else []
        if not nodes:
            return ""
        counts = self.shell.run(nodes, SESSIONS)
        logged_in = [name for name, result in counts.items() if result.ok and result.stdout.strip() not in ("", "0")]
        return f"an SSH session on {', '.join(sorted(logged_in))}" if logged_in else ""
