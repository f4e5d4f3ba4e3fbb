"""The SSH side of `up`: pin new nodes' host keys, run the playbooks, write the master's files, check reach."""
from __future__ import annotations

import shlex

from xeoncluster.cluster import cluster_files
from xeoncluster.cluster.cluster_files import preferred_key, read_known
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.image import stack_digest
from xeoncluster.cluster.packages import pip_args
from xeoncluster.cluster.playbook import PlaybookRunner
from xeoncluster.cluster.state import ClusterRecord, atomic_write
from xeoncluster.core.errors import ProviderError, XeonClusterError
from xeoncluster.core.stacks import get_stack
from xeoncluster.providers.abilities import ReadsHostKeys
from xeoncluster.providers.base import Node
from xeoncluster.remote.shell import NodeShell, RemoteFile
from xeoncluster.wire.layout import HOSTFILE, KNOWN_HOSTS, MASTER_KEY, SSH_CONFIG, VENV, home_relative

UNREACHABLE = "xeoncluster-unreachable"


def add_nodes(ctx: CommandContext, record: ClusterRecord, nodes: list[Node], shell: NodeShell,
              trust_first_use: bool = True) -> None:
    """Record new nodes before anything else can fail, then wait for SSH and pin their keys (host_key)."""
    record.set_nodes(record.node_list() + nodes)
    record.add_resources("nodes", [n.id for n in nodes])
    ctx.state.save(record)
    shell.wait_ready(nodes, ctx.config.ssh.timeout)
    pin_host_keys(ctx, record.node_list(), shell, new={n.name for n in nodes}, trust_first_use=trust_first_use)
    shell.wait_login(nodes, ctx.config.ssh.timeout, ctx.reporter.detail)


def pin_host_keys(ctx: CommandContext, nodes: list[Node], shell: NodeShell, new: set[str],
                  trust_first_use: bool = True) -> None:
    """Pin each node's host key (host_key). A `new` node's name may have been another machine's (a replaced
    or lost node's), whose pin says nothing of it."""
    known = read_known(ctx.state)
    entries = []
    for node in nodes:
        key = None if node.name in new else known.get(node.name)
        entries.append((node, key or host_key(ctx, shell, node, trust_first_use)))
    atomic_write(ctx.state.known_hosts, cluster_files.known_hosts(entries))
    atomic_write(ctx.state.ssh_config, cluster_files.user_ssh_config(
        nodes, ctx.identity().user, ctx.state.key, ctx.state.known_hosts))


def host_key(ctx: CommandContext, shell: NodeShell, node: Node, trust_first_use: bool) -> str:
    """The node's key as its provider shows it out of band. Where that shows none in time, what answers at
    the node's address is trusted on first use only with `trust_first_use`: `up`, which its user watches,
    not the run agent, whose pins reach every node. A provider with no such source leaves only a scan."""
    if not isinstance(ctx.provider, ReadsHostKeys):
        return shell.scan_host_key(node)
    offered = ctx.provider.host_keys(node)
    if offered:
        return preferred_key(offered)
    if not trust_first_use:
        raise ProviderError(f"the {ctx.provider.name} provider showed no host key for {node.name} ({node.id}) in "
                            "time, and the cluster's agent trusts none on first use",
                            hint="the provider shows a node's keys once its boot has printed them: a slow boot "
                                 "leaves the node out, and the run goes on without it")
    return shell.scan_host_key(node)


def playbook_runner(ctx: CommandContext, shell: NodeShell) -> PlaybookRunner:
    stack = get_stack(ctx.config.stack)
    pip = pip_args(ctx.config, stack, ctx.provider.shares_host, ctx.reporter.info)
    variables = {
        "venv": home_relative(VENV),
        "stack": stack.name,
        "python": stack.python,
        "python_min": ", ".join(str(v) for v in stack.python_min),
        "stack_digest": stack_digest(stack),
        "packages": " ".join(shlex.quote(p) for p in stack.packages),
        "pip_args": " ".join(shlex.quote(a) for a in pip),
        "apt_sources": " ".join(shlex.quote(line) for line in ctx.config.apt.sources),
        "apt_proxy": shlex.quote(ctx.config.apt.proxy) if ctx.config.apt.proxy else "",
    }
    return PlaybookRunner(shell, variables, apply_os_steps=not ctx.provider.shares_host,
                          log=ctx.reporter.log, log_path=ctx.reporter.log_path)


def write_cluster_files(ctx: CommandContext, nodes: list[Node], shell: NodeShell) -> None:
    shell.put_files(nodes[0], [*master_ssh_files(ctx, nodes), RemoteFile(HOSTFILE, cluster_files.hostfile(nodes))])
    atomic_write(ctx.state.hostfile, cluster_files.hostfile(nodes), 0o644)


def master_ssh_files(ctx: CommandContext, nodes: list[Node]) -> list[RemoteFile]:
    """What lets the master (mpiexec) reach each of `nodes` by name: the key, its ssh_config and pins."""
    user = ctx.identity().user
    known = read_known(ctx.state)
    return [
        RemoteFile(MASTER_KEY, ctx.state.key.read_text(), 0o600),
        RemoteFile(SSH_CONFIG, cluster_files.master_ssh_config(nodes, user), 0o600),
        RemoteFile(KNOWN_HOSTS, cluster_files.known_hosts([(n, known[n.name]) for n in nodes], address="private_ip")),
    ]


def mesh_command(nodes: list[Node]) -> str:
    """One parallel ssh per node; each failure prints its node (a bare `wait` would hide them)."""
    names = " ".join(shlex.quote(n.name) for n in nodes)
    return (f"for h in {names}; do (ssh -o BatchMode=yes -o ConnectTimeout=10 \"$h\" true >/dev/null 2>&1 "
            f"|| echo \"{UNREACHABLE} $h\") & done; wait")


def check_mesh(ctx: CommandContext, nodes: list[Node], shell: NodeShell) -> None:
    result = shell.run([nodes[0]], mesh_command(nodes))[nodes[0].name]
    failed = sorted(line.split()[1] for line in result.stdout.splitlines() if line.startswith(UNREACHABLE))
    if failed or not result.ok:
        detail = ", ".join(failed) if failed else result.last_line()
        raise XeonClusterError(f"the master cannot reach {detail} by name over SSH",
                               hint="check the nodes' security group / network", log=ctx.reporter.log_path)


# Before CreateImage: flush the gigabytes pip just wrote (a NoReboot snapshot is crash-consistent),
# and keep out of the image what belongs to this instance or cluster: the authorized key cloud-init
# added, the machine id and cloud-init's instance state. The snapshot is taken when CreateImage is
# called, so RESTORE puts them back on the running master right after; its SSH connection stays open.
IMAGE_PREPARE = (
    "if [ -e ~/.ssh/id_ed25519 ]; then echo 'refusing to bake: a private key is on the node' >&2; exit 1; fi; "
    "cp -p ~/.ssh/authorized_keys ~/.ssh/authorized_keys.xc-bake 2>/dev/null || true; "
    ": > ~/.ssh/authorized_keys 2>/dev/null || true; "
    "sudo sh -c 'if [ -s /root/.ssh/authorized_keys ]; then cp -p /root/.ssh/authorized_keys /root/.xc-bake-keys; "
    ": > /root/.ssh/authorized_keys; fi; cp -p /etc/machine-id /etc/machine-id.xc-bake && : > /etc/machine-id; "
    "if [ -d /var/lib/cloud ]; then mv /var/lib/cloud /var/lib/cloud.xc-bake; fi; sync'"
)
IMAGE_RESTORE = (
    "if [ -e ~/.ssh/authorized_keys.xc-bake ]; then mv ~/.ssh/authorized_keys.xc-bake ~/.ssh/authorized_keys; fi; "
    "sudo sh -c 'if [ -e /root/.xc-bake-keys ]; then mv /root/.xc-bake-keys /root/.ssh/authorized_keys; fi; "
    "if [ -e /etc/machine-id.xc-bake ]; then mv /etc/machine-id.xc-bake /etc/machine-id; fi; "
    "if [ -d /var/lib/cloud.xc-bake ]; then rm -rf /var/lib/cloud; mv /var/lib/cloud.xc-bake /var/lib/cloud; fi'"
)

# After the disk grew: grow the root partition (growpart says NOCHANGE and exits 1 when there is
# nothing to do) and its filesystem. A root that is not a partition of a disk has nothing to grow.
GROW_ROOT_FS = (
    "src=$(findmnt -no SOURCE /); "
    "case \"$src\" in /dev/*) ;; *) echo \"root is $src: nothing to grow\"; exit 0;; esac; "
    "part=$(cat /sys/class/block/$(basename \"$src\")/partition 2>/dev/null || true); "
    "if [ -n \"$part\" ]; then sudo growpart \"/dev/$(lsblk -no PKNAME \"$src\" | head -n 1)\" \"$part\" || true; fi; "
    "if [ \"$(findmnt -no FSTYPE /)\" = xfs ]; then sudo xfs_growfs /; else sudo resize2fs \"$src\"; fi; df -h /"
)


def run_on_master(ctx: CommandContext, master: Node, shell: NodeShell, command: str, doing: str) -> None:
    result = shell.run([master], command)[master.name]
    ctx.reporter.log(f"[{master.name}] {doing}: exit {result.exit_code}\n{result.stdout}{result.stderr}")
    if not result.ok:
        raise XeonClusterError(f"{doing} failed on {master.name}: {result.last_line()}", log=ctx.reporter.log_path)
