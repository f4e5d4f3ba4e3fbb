"""`xeoncluster runs --compare [RUN|SWEEP]...`: runs side by side, the swept values beside what each
reached. Records come from the master, or from storage once the cluster is gone; metrics.json from
the results folder here, fetched first (from the master or storage) for a run that succeeded.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xeoncluster.cluster import untrusted
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.commands import runs as runs_cmd
from xeoncluster.commands.storage.stored_runs import fetch_stored_results, stored_metrics
from xeoncluster.commands.train.train import fetch_run_results
from xeoncluster.commands.train.train_results import results_dir
from xeoncluster.core.errors import ConfigError, XeonClusterError
from xeoncluster.runs.record import RunRecord, RunState

SCORES = ("exact_match", "f1", "accuracy", "eval_loss")


@dataclass(frozen=True)
class Compared:
    record: RunRecord
    final: dict[str, float] = field(default_factory=dict)  # the final eval scores (SCORES) it reported
    best_eval_loss: float | None = None                      # the lowest eval_loss seen during the run
    train_loss: float | None = None

    def to_dict(self) -> dict[str, object]:
        r = self.record
        return {"run": r.run, "sweep": r.sweep, "params": dict(r.params), "state": r.state.value,
                "final": dict(self.final), "best_eval_loss": self.best_eval_loss, "train_loss": self.train_loss,
                "steps": r.step, "seconds": round(r.seconds, 1), "restarts": len(r.restarts),
                "cost_usd": round(r.cost_usd, 6)}


def compare(ctx: CommandContext, names: tuple[str, ...]) -> list[Compared]:
    records = chosen(runs_cmd.list_runs(ctx).records, names, ctx.config.name)
    return [scored(record, _metrics(ctx, record)) for record in reversed(records)]


def chosen(records: list[RunRecord], names: tuple[str, ...], cluster: str) -> list[RunRecord]:
    """The runs named, each given as a run or a sweep (all of its runs); none named: every run."""
    if not names:
        return records
    unknown = [n for n in names if not any(n in (r.run, r.sweep) for r in records)]
    if unknown:
        raise ConfigError(f"no run or sweep {', '.join(map(repr, unknown))} on cluster '{cluster}'",
                          hint=f"`xeoncluster runs --name {cluster}` lists its runs")
    return [r for r in records if r.run in names or r.sweep in names]


def _metrics(ctx: CommandContext, record: RunRecord) -> dict[str, Any]:
    path = results_dir(ctx, record.run) / "metrics.json"
    if not path.exists() and record.state is RunState.SUCCEEDED:
        try:
            if runs_cmd.cluster_is_up(ctx):
                fetch_run_results(ctx, record.run, record)
            else:
                fetch_stored_results(ctx, record.run)
        except (XeonClusterError, OSError) as exc:
            ctx.reporter.warn(f"run {record.run}: its metrics could not be fetched ({exc}); shown without them")
    return stored_metrics(path) if path.exists() else {}


def scored(record: RunRecord, metrics: dict[str, Any]) -> Compared:
    """Only numbers are taken from metrics.json: it was written on the cluster."""
    final = {k: v for k in SCORES if (v := _number(metrics.get(k))) is not None}
    history = metrics.get("log_history")
    entries = history if isinstance(history, list) else []
    losses = [v for e in entries if isinstance(e, dict) and (v := _number(e.get("eval_loss"))) is not None]
    if "eval_loss" in final:
        losses.append(final["eval_loss"])
    return Compared(record, final, min(losses) if losses else None, _number(metrics.get("train_loss")))


_number = untrusted.finite
