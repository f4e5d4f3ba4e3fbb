"""The run agent's copy of a run into storage: every checkpoint when it is saved, the log and events as
they grow, and at the end the results and the final model.

Uploads run in a thread of the agent, never in the ranks: training goes on while a checkpoint is
copied, and a failed upload is retried with backoff and reported, never fatal to the run. A
checkpoint counts as durable only once its MANIFEST.json (written last) is there; only the newest
`keep` durable checkpoints are kept.
"""
from __future__ import annotations

import faulthandler
import json
import queue
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from xeoncluster.agent.checkpoint_source import CheckpointSource
from xeoncluster.node.events.trackers import TENSORBOARD_DIR
from xeoncluster.runs.stored_checkpoints import durable_steps
from xeoncluster.storage.base import MANIFEST, Storage
from xeoncluster.wire.run_outputs import TASK_RESULTS

RETRY_DELAYS = (2, 5, 15, 30, 60)
# A job still running after this long is reported, with every thread's stack in the agent's log:
# an upload that hangs (rather than fails) would otherwise hold every later checkpoint back in silence.
SLOW_SECONDS = 180.0
Job = Callable[[], None]


class StorageSync:
    def __init__(self, storage: Storage, cluster: str, run: str, source: CheckpointSource, keep: int,
                 logs: list[Path], report: Callable[[str], None],
                 outputs: tuple[str, ...] | None = TASK_RESULTS) -> None:
        self.storage, self.source, self.keep, self.logs, self.report = storage, source, keep, logs, report
        self.outputs = outputs  # None: all the run's output (a user's script)
        self.base = storage.location.run_key(cluster, run)
        self.durable: int | None = None
        self.failures = 0
        self._jobs: queue.Queue[tuple[str, Job] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="xc-storage", daemon=True)
        self._thread.start()

    def checkpoint(self, step: int) -> None:
        self._jobs.put((f"checkpoint-{step}", lambda: self._checkpoint(step)))

    def log_files(self) -> None:
        self._jobs.put(("the log and events", self._log_files))

    def results(self) -> None:
        self._jobs.put(("the results and the model", self._results))

    def tensorboard(self, nodes: Path) -> None:
        """The ranks' TensorBoard files (in the master's run folder) and the agent's of the nodes' use."""
        self._jobs.put(("the TensorBoard files", lambda: self._tensorboard(nodes)))

    def close(self, timeout: float) -> bool:
        """Wait for what is queued, up to `timeout` seconds; True if everything was stored."""
        self._jobs.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            what, run = job
            watchdog = threading.Timer(SLOW_SECONDS, self._slow, (what,))
            watchdog.daemon = True
            watchdog.start()
            try:
                self._attempts(what, run)
            finally:
                watchdog.cancel()

    def _slow(self, what: str) -> None:
        self.report(f"storing {what} has taken over {SLOW_SECONDS:.0f}s so far; "
                    "the agent's log has its threads' stacks")
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)

    def _attempts(self, what: str, run: Job) -> None:
        for delay in (*RETRY_DELAYS, None):
            try:
                run()
                break
            except Exception as exc:  # noqa: BLE001 - storage must never fail the training: report, retry
                self.report(f"storing {what} failed ({type(exc).__name__}: {exc})"
                            + (f"; retrying in {delay}s" if delay is not None else "; giving up on it"))
                if delay is None:
                    self.failures += 1
                else:
                    time.sleep(delay)

    def _checkpoint(self, step: int) -> None:
        local = self.source.snapshot(step)
        if not local.is_dir():
            # Retrying cannot bring it back, and every retry's wait would let the next ones go too.
            self.report(f"checkpoint-{step} was replaced by a newer one before it could be stored; skipped")
            return
        try:
            files = {str(p.relative_to(local)): p.stat().st_size for p in sorted(local.rglob("*")) if p.is_file()}
            prefix = f"{self.base}/checkpoints/checkpoint-{step}"
            for name in files:
                self.storage.put_file(local / name, f"{prefix}/{name}")
            self.storage.put_text(f"{prefix}/{MANIFEST}", json.dumps({"step": step, "files": files}, indent=1))
        finally:
            self.source.release(local)
        self.durable = step
        self._prune()

    def _prune(self) -> None:
        steps = durable_steps(self.storage, self.base)
        for old in steps[:-self.keep]:
            prefix = f"{self.base}/checkpoints/checkpoint-{old}"
            keys = [o.key for o in self.storage.objects(prefix)]
            self.storage.delete(sorted(keys, key=lambda k: not k.endswith(MANIFEST)))  # the manifest first

    def _log_files(self) -> None:
        for path in self.logs:
            if path.exists():
                self.storage.put_file(path, f"{self.base}/{path.name}")

    def _tensorboard(self, nodes: Path) -> None:
        local = self.source.results((TENSORBOARD_DIR,), with_model=False)
        try:
            folders = [(local / TENSORBOARD_DIR, f"{TENSORBOARD_DIR}/ranks"), (nodes, f"{TENSORBOARD_DIR}/nodes")]
            for folder, prefix in folders:
                for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
                    if path.is_file():
                        self.storage.put_file(path, f"{self.base}/results/{prefix}/{path.relative_to(folder)}")
        finally:
            self.source.release(local)

    def _results(self) -> None:
        local = self.source.results(self.outputs)
        try:
            for path in sorted(local.rglob("*")):
                if path.is_file():
                    name = path.relative_to(local)
                    top = "model" if name.parts[0] == "model" else "results"
                    key = f"{self.base}/{top}/{Path(*name.parts[1:]) if top == 'model' else name}"
                    self.storage.put_file(path, key)
        finally:
            self.source.release(local)
        self._log_files()
