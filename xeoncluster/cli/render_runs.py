"""Rendering runs for people: the end of a followed run, a submitted or detached one, the runs table.
Formatting only; nothing runs here."""
from __future__ import annotations

import shlex
import time
from typing import TYPE_CHECKING

from rich.table import Table

from xeoncluster.cli.render import _console, launch_plan
from xeoncluster.cli.render_live import live_lines, stopped_line, zone_line
from xeoncluster.cli.render_training import echo_line
from xeoncluster.cluster.untrusted import finite
from xeoncluster.runs.display import shown
from xeoncluster.runs.queue_order import ordinal

if TYPE_CHECKING:
    from xeoncluster.commands.compare import Compared
    from xeoncluster.commands.storage.stored_runs import StoredRun
    from xeoncluster.commands.train.train import Planned, Submitted, TrainOutcome
    from xeoncluster.runs.record import RunRecord


def training_result(outcome: TrainOutcome, cluster: str) -> None:
    echo_line.close()
    if outcome.detached:
        detached(outcome.record.run, cluster)
        return
    console = _console()
    fetched = outcome.fetched
    metrics = fetched.metrics if fetched else {}
    # metrics.json was written on the cluster: only finite numbers are shown as scores.
    found = {k: v for k in ("exact_match", "f1", "accuracy") if (v := finite(metrics.get(k))) is not None}
    scores = ", ".join(f"{k}={v:.2f}" for k, v in found.items())
    # The training side writes eval_before as {metric: score or None}, or null.
    raw_before = metrics.get("eval_before")
    before = {k: v for k in found if isinstance(raw_before, dict) and (v := finite(raw_before.get(k))) is not None}
    if before:
        scores += "  (untrained: " + ", ".join(f"{k}={v:.2f}" for k, v in before.items()) + ")"
    console.print(shown(f"done in {outcome.record.seconds:.0f}s: {scores or 'no evaluation set, no scores'}"))
    speed = finite(metrics.get("train_samples_per_second"))
    if speed is not None:
        console.print(shown(f"throughput: {speed:.1f} samples/s on {metrics.get('world_size')} rank(s), "
                            f"{metrics.get('threads_per_rank')} thread(s) each, {metrics.get('precision')}"))
    for restart in outcome.record.restarts:
        console.print(shown(restart.describe()))
    if outcome.record.restarts:
        console.print(f"lost to interruptions: {outcome.record.lost_steps} step(s)")
    if fetched is not None:
        console.print(f"metrics: {fetched.metrics_path}")
        if fetched.results:
            console.print(shown(f"results: {', '.join(p.name for p in fetched.results)} in "
                                f"{fetched.results[0].parent}"))
        if fetched.model_dir:
            console.print(f"model: {fetched.model_dir}")


def detached(run: str, cluster: str) -> None:
    _console().print(f"detached: run {run} goes on on the cluster; follow it with `xeoncluster logs {run} -f --name "
                     f"{cluster}`, stop it with `xeoncluster cancel {run} --name {cluster}`")


def submitted(result: Submitted) -> None:
    run = result.plan.run
    what = result.queued or f"run {run} started"
    _console().print(f"{what} ({result.plan.ranks.world_size} ranks, agent on {result.host}); follow it "
                     f"with `xeoncluster logs {run} -f --name {result.cluster}`, stop it with "
                     f"`xeoncluster cancel {run} --name {result.cluster}`")


def planned(result: Planned) -> None:
    """--dry-run: one run's launch in full; a sweep's runs one line each."""
    if len(result.runs) == 1 and not result.runs[0][0].params:
        launch_plan(result.runs[0][1])
        return
    table = Table(title=f"{len(result.runs)} runs would be queued, in this order", title_justify="left")
    for column in ("run", "values", "arguments after --"):
        table.add_column(column)
    for point, plan, args in result.runs:
        values = ", ".join(f"{k}={v}" for k, v in point.params.items())
        table.add_row(*map(shown, (plan.run, values, shlex.join(args))))
    _console().print(table)


def _when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp)) if stamp else "-"


def _duration(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def runs_table(records: list[RunRecord], cluster: str, notes: list[str], places: dict[str, int]) -> None:
    table = Table(title=f"runs of cluster '{cluster}'", title_justify="left")
    for column in ("run", "task", "state", "step", "restarts", "started", "duration", "cost $"):
        table.add_column(column)
    for r in records:
        step = f"{r.step}/{r.total_steps}" if r.total_steps else str(r.step)
        state = f"{r.state.value} ({ordinal(places[r.run])})" if r.run in places else r.state.value
        state += f" ({r.shrunk})" if r.shrunk else ""
        table.add_row(*map(shown, (r.run, r.task, state, step, str(len(r.restarts)), _when(r.started_at),
                                   _duration(r.seconds), f"{r.cost_usd:.4f}")))
    console = _console()
    console.print(table)
    for record in records:
        for line in [*live_lines(record), zone_line(record), stopped_line(record)]:
            if line:
                console.print(shown(line))
    for note in notes:
        console.print(shown(f"note: {note}"))


def compare_table(compared: list[Compared]) -> None:
    table = Table(title=f"{len(compared)} run(s) side by side", title_justify="left")
    scores = [k for k in ("exact_match", "f1", "accuracy", "eval_loss") if any(k in c.final for c in compared)]
    for column in ("run", "values", "state", *scores, "best eval_loss", "train loss", "steps", "time", "restarts",
                   "cost $"):
        table.add_column(column)
    for c in compared:
        r = c.record
        values = ", ".join(f"{k}={v}" for k, v in r.params.items()) or "-"
        table.add_row(*map(shown, (r.run, values, r.state.value, *(_score(c.final.get(k)) for k in scores),
                                   _score(c.best_eval_loss), _score(c.train_loss), str(r.step), _duration(r.seconds),
                                   str(len(r.restarts)), f"{r.cost_usd:.4f}")))
    _console().print(table)


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def stored_table(runs: list[StoredRun], url: str) -> None:
    table = Table(title=f"runs kept in {url}", title_justify="left")
    for column in ("cluster", "run", "task", "state", "step", "durable checkpoints", "size"):
        table.add_column(column)
    for item in runs:
        r = item.record
        step = f"{r.step}/{r.total_steps}" if r.total_steps else str(r.step)
        table.add_row(*map(shown, (r.cluster, r.run, r.task, r.state.value, step,
                                   ", ".join(map(str, item.checkpoints)) or "-", f"{item.size_bytes / 2**20:.1f} MiB")))
    _console().print(table)
