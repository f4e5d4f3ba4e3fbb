"""The forked rank: it runs as `python -m xeoncluster.node` would have, from where its libraries are
already imported, and ends the process as a rank ends (process_exit.leave)."""
from __future__ import annotations

import faulthandler
import traceback

from xeoncluster.node.diagnostics.startup_clock import StartupClock
from xeoncluster.node.startup.process_exit import leave
from xeoncluster.node.warm_start.wire import Request


def run_forked(request: Request) -> None:
    from xeoncluster.node.__main__ import main

    faulthandler.enable()
    code = 1
    try:
        code = main(request.argv[1:], StartupClock(process=request.started))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - as the interpreter would: the traceback, then exit code 1
        traceback.print_exc()
    leave(code)
