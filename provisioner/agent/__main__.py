"""`python -m provisioner.agent run CLUSTER RUN`: the run agent, started detached by `train`.

It reads everything from its home ($XEONCLUSTER_HOME on the host it runs on): the cluster's state
and the run's folder, and writes the run's record, log and events there.
"""
from __future__ import annotations

import argparse
import sys

from ..errors import XeonClusterError
from .context import agent_context
from .record import RunFiles
from .submission import Submission
from .supervisor import Supervisor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m provisioner.agent")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="supervise one submitted run to its end")
    run.add_argument("cluster")
    run.add_argument("run")
    args = parser.parse_args(argv)
    try:
        ctx = agent_context(args.cluster)
        files = RunFiles(ctx.state.runs / args.run)
        env = files.env.read_text() if files.env.exists() else "{}"
        submission = Submission.from_json(files.request.read_text(), env)
        return Supervisor(ctx, files, submission).run()
    except XeonClusterError as exc:
        print(f"agent: {exc.one_line()}", file=sys.stderr, flush=True)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
