"""`python -m xeoncluster.node squad|glue|demo-assets ...`"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import traceback

from xeoncluster.node.diagnostics.startup_clock import StartupClock
from xeoncluster.node.rank_env import XC_ENV_FILE
from xeoncluster.node.startup.errors import TrainingError


def load_env_file(environ: os._Environ[str] | dict[str, str]) -> None:
    """`xeoncluster train --env` values: read from a 0600 file, never from argv (visible to `ps`).
    Before anything imports torch, so thread settings among them still take effect."""
    path = environ.get(XC_ENV_FILE)
    if path:
        with open(path) as handle:
            environ.update({str(k): str(v) for k, v in json.load(handle).items()})


FAILURE_LINES = 12


def report_failure(reason: str, lines: tuple[str, ...]) -> None:
    """Any rank that fails says so as an event: its rank, its node and its last lines reach the agent
    even when MPI only reports that a process exited."""
    from xeoncluster.node.events.events import FailedEvent, emit
    from xeoncluster.node.startup.distributed import from_env, own_address

    emit(FailedEvent(rank=from_env(os.environ).rank, node=own_address(), reason=reason, lines=lines))


def main(argv: list[str] | None = None, clock: StartupClock | None = None) -> int:
    clock = clock or StartupClock()
    load_env_file(os.environ)

    from xeoncluster.node.events.labels import label_streams
    from xeoncluster.node.startup import cli
    from xeoncluster.node.startup.distributed import from_env

    info = from_env(os.environ)
    if info.world_size > 1:
        label_streams(info.rank)

    try:
        args, overrides = cli.parse(argv)
        if args.command == "demo-assets":
            from xeoncluster.node.tasks.demo_assets import ensure_demo_assets

            built = ensure_demo_assets(args.out, args.seed)
            print(f"training: demo assets {'built' if built else 'already complete'} in {args.out}")
            return 0
        from xeoncluster.node.startup.run_config import from_args
        from xeoncluster.node.startup.runner import run

        return run(from_args(args, overrides), clock)
    except TrainingError as exc:
        report_failure(str(exc), (f"training: {exc}",))
        print(f"training: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("training: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        report_failure(f"{type(exc).__name__}: {exc}", tuple(traceback.format_exc().splitlines()[-FAILURE_LINES:]))
        raise
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def start(argv: list[str]) -> int:
    """A rank MPI started runs forked from the node's warm server when it can (warm_start), else here."""
    from xeoncluster.node.warm_start.relay import run_warm

    load_env_file(os.environ)  # its values are part of what a warm server must have been started with
    code = run_warm(argv, os.environ)
    if code is not None:
        return code
    # A rank that dies in native code (SIGABRT, SIGSEGV) prints where each of its threads was: its last
    # lines reach the run's log, where MPI alone would only say which signal killed it. Here, not in
    # main(): the process's stderr, not whatever stands in for it where main() is called in-process.
    faulthandler.enable()
    return main(argv[1:])


if __name__ == "__main__":
    from xeoncluster.node.startup.process_exit import leave

    leave(start(sys.argv))
