"""Every rank's Python stacks on demand: SIGUSR1 writes all its threads' stacks into
OUTPUT_DIR/stacks/rank-N.txt. The run agent sends it when the run stops stepping, so the stack of
a rank stuck in an all-reduce (or anywhere) is kept before the job is restarted."""
from __future__ import annotations

import faulthandler
import signal
from pathlib import Path

STACKS_DIR = "stacks"


def dump_stacks_on_signal(output_dir: Path | str, rank: int) -> None:
    folder = Path(output_dir) / STACKS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    # faulthandler keeps its own reference to the file for as long as the handler is registered.
    handle = open(folder / f"rank-{int(rank)}.txt", "a")  # noqa: SIM115 - lives as long as the rank
    faulthandler.register(signal.SIGUSR1, file=handle, all_threads=True)
