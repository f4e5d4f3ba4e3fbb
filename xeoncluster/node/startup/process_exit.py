"""How a rank's process ends: its exit handlers run, then it exits without interpreter finalization.

Finalization is where torch's distributed teardown goes wrong, in two ways seen on these ranks:
- a gloo worker thread that drops a finished collective (the last RNG-state all_gather, which the
  rank already has the result of) releases tensors Python owns, so it takes the GIL; once finalization
  has begun, Python ends any thread that asks for it, inside C++, and the rank aborts ("terminate called
  without an active exception", SIGABRT, so MPI reports BAD TERMINATION for a run that succeeded).
  dist.destroy_process_group() does not stop those threads: DDP keeps the group alive.
- ~ProcessGroupGloo can deadlock on one rank of two while a script still references the group.
And a thread a user's script left running would keep the rank, and so the whole job, from ending.
"""
from __future__ import annotations

import atexit
import os
import sys


def leave(code: int) -> None:
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
