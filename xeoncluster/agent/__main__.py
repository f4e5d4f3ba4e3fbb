"""`python -m xeoncluster.agent run CLUSTER RUN`: the run agent, started detached by `train`;
`python -m xeoncluster.agent watch CLUSTER`: the cluster's watch agent (agent/watch.py), started by `up`;
`python -m xeoncluster.agent hold|release CLUSTER HOLDER`: a repair's lease on the queue
(agent/repair_lease.py), taken, renewed and ended by `up`;
`python -m xeoncluster.agent takeover CLUSTER NODE`: on a worker, take the place of a master that is gone
(agent/takeover.py), started by the worker's orphan watch.

It reads everything from its home ($XEONCLUSTER_HOME on the host it runs on): the cluster's state
and the run's folder, and writes the run's record, log and events there.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from xeoncluster.agent.activity import Activity
from xeoncluster.agent.cluster_spend import cluster_spend
from xeoncluster.agent.context import agent_context
from xeoncluster.agent.heartbeat import Heartbeat
from xeoncluster.agent.queue import Queue
from xeoncluster.agent.replica import Replica
from xeoncluster.agent.self_removal import SelfRemoval
from xeoncluster.agent.succession import Succession
from xeoncluster.agent.supervisor import Supervisor
from xeoncluster.agent.takeover import takeover as take_over
from xeoncluster.agent.watch import Watcher
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.master_lease import LeaseBook
from xeoncluster.cluster.state import StateDir
from xeoncluster.core.errors import XeonClusterError
from xeoncluster.providers.registry import spec_for
from xeoncluster.remote.shell import NodeShell
from xeoncluster.runs.host import LocalHost
from xeoncluster.runs.record import RunFiles
from xeoncluster.runs.submission import Submission
from xeoncluster.wire.contract import QUEUE_HELD_ELSEWHERE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xeoncluster.agent")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="supervise one submitted run to its end")
    run.add_argument("cluster")
    run.add_argument("run")
    watch = sub.add_parser("watch", help="remove the cluster when it is idle or at its deadline")
    watch.add_argument("cluster")
    for verb, what in (("hold", "take or renew a repair's lease on the queue"), ("release", "end it")):
        lease = sub.add_parser(verb, help=what)
        lease.add_argument("cluster")
        lease.add_argument("holder")
        if verb == "hold":
            lease.add_argument("seconds", type=float)
    takeover = sub.add_parser("takeover", help="on a worker: replace a master that is gone, and carry its runs on")
    takeover.add_argument("cluster")
    takeover.add_argument("node")
    args = parser.parse_args(argv)
    if args.command in ("hold", "release"):
        return hold_queue(args)
    try:
        ctx = agent_context(args.cluster)
        if args.command == "watch":
            return watch_cluster(ctx)
        if args.command == "takeover":
            return take_over(ctx, args.node)
        files = RunFiles(ctx.state.runs / args.run)
        try:
            env = files.env.read_text() if files.env.exists() else "{}"
            submission = Submission.from_json(files.request.read_text(), env)
            return Supervisor(ctx, files, submission).run()
        finally:  # the supervisor forgets the values at the run's end; this, when it never got to run
            files.env.unlink(missing_ok=True)
    except XeonClusterError as exc:
        print(f"agent: {exc.one_line()}", file=sys.stderr, flush=True)
        return exc.exit_code


def hold_queue(args: argparse.Namespace) -> int:
    """Neither the cluster's state nor its provider is needed: only the queue's folder."""
    queue = Queue(StateDir(args.cluster).runs)
    if args.command == "release":
        queue.release(args.holder)
        return 0
    lease = queue.hold(args.holder, args.seconds)
    if lease.holder != args.holder:
        print(f"agent: the queue is held by {lease.holder} for {lease.expires_at - time.time():.0f}s more",
              file=sys.stderr, flush=True)
        return QUEUE_HELD_ELSEWHERE
    return 0


def watch_cluster(ctx: CommandContext) -> int:
    def report(line: str) -> None:
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} watch: {line}", file=sys.stderr, flush=True)

    host = LocalHost(str(ctx.state.home), sys.executable)
    shell = ctx.shell()
    try:
        heartbeat = Heartbeat(ctx.state.load, shell, spec_for(ctx.config.provider).poweroff, report,
                              succession(ctx, shell, report))
        return Watcher(ctx.state.path, Activity(ctx, host, shell), SelfRemoval(ctx, host, report), report,
                       heartbeat, spend=cluster_spend(ctx)).run()
    finally:
        shell.close()


def succession(ctx: CommandContext, shell: NodeShell, report: Callable[[str], None]) -> Succession:
    """Without storage there is no lease: the workers keep a copy, and a takeover says why it cannot."""
    record = ctx.state.load()
    location = record.storage if record else None
    book = LeaseBook(ctx.provider.open_storage(location), ctx.config.name, spec_for(ctx.config.provider).instance_id,
                     report) if location is not None else None
    return Succession(Replica(shell, ctx.state), book)


if __name__ == "__main__":
    sys.exit(main())
