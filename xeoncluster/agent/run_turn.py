"""A run's turn in the cluster's queue: wait until every run submitted before it has ended and no repair
holds the queue (agent/queue.py), saying where it stands whenever that changes."""
from __future__ import annotations

import time

from xeoncluster.agent.current_run import CurrentRun
from xeoncluster.agent.queue import Queue
from xeoncluster.runs.queue_order import place_line

QUEUE_POLL_SECONDS = 1.0


def wait_turn(run: CurrentRun) -> bool:
    """Until every run before this one has ended (or a cancel came); whether it had to wait."""
    queue = Queue(run.files.path.parent)
    said = ""
    while not run.cancelled.is_set():
        turn = queue.take_turn(run.record.run, lambda: run.keeper.started(run.storage.where))
        if turn.taken:
            return bool(said)
        line = place_line(run.record.run, turn.ahead) if turn.ahead else \
            f"run {run.record.run} is next in line, after the repair of the cluster (`up`) under way"
        if line != said:
            run.keeper.queued()
            if not said:
                run.storage.queued_record()
            run.note(line)
            said = line
        time.sleep(QUEUE_POLL_SECONDS)
    return bool(said)
