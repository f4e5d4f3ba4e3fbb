"""A job started ahead of a swap (agent/prestart.py) waits here, ready to train, for its release.

Its ranks started while the old job still trained: they imported the libraries, joined the process group
(on a port of their own), loaded the model and the data. What they cannot have yet is the checkpoint the
old job writes when it stops; the agent releases them once it is on every node, by writing the file
XC_HOLD_FILE names on each. They then resume from it as any relaunch does.
"""
from __future__ import annotations

import time
from pathlib import Path

from xeoncluster.node.startup.errors import TrainingError

HOLD_SECONDS = 600.0  # longer than any swap; a job whose agent never released it ends rather than wait for ever
POLL_SECONDS = 0.05   # the release is the pause's critical path: a file test each 50 ms costs nothing


def wait_for_release(release: Path, seconds: float = HOLD_SECONDS, poll: float = POLL_SECONDS) -> float:
    """The seconds waited until `release` exists; TrainingError once `seconds` went by without it."""
    began = time.monotonic()
    while not release.exists():
        if time.monotonic() - began > seconds:
            raise TrainingError(f"started ahead of a swap, and not released within {seconds:g}s ({release} "
                                "never appeared): the agent went another way")
        time.sleep(poll)
    return time.monotonic() - began
