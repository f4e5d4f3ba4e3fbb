"""Runs as storage keeps them: what `runs`, `logs` and `storage` read when the cluster is gone (or
was never on this machine), and what `storage rm` removes."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from xeoncluster.cluster import untrusted
from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.commands.train.train_results import Fetched, results_dir
from xeoncluster.core.errors import ConfigError
from xeoncluster.job.train_request import RUN_NAME
from xeoncluster.runs.record import RunRecord
from xeoncluster.runs.record_checks import checked, not_a_record
from xeoncluster.runs.stored_checkpoints import durable_steps
from xeoncluster.storage.base import Storage, StorageLocation


@dataclass(frozen=True)
class StoredRun:
    record: RunRecord
    checkpoints: tuple[int, ...]
    size_bytes: int


def open_storage(ctx: CommandContext, url: str | None = None) -> tuple[StorageLocation, Storage]:
    """The config's storage (read-only: an `auto` bucket that does not exist yet holds nothing)."""
    location = ctx.provider.storage_location(ctx.config, url or ctx.config.storage.url, ctx.state.home / "storage",
                                             create=False)
    return location, ctx.provider.open_storage(location)


def stored_runs(ctx: CommandContext, cluster: str | None = None, url: str | None = None) -> list[StoredRun]:
    """The runs kept in storage (the config's, or `url`), of one cluster or of all, newest first."""
    location, storage = open_storage(ctx, url)
    found = []
    for item in storage.objects(location.key(cluster) if cluster else location.key()):
        parts = item.key[len(location.key()):].strip("/").split("/")
        if len(parts) == 4 and parts[1] == "runs" and parts[3] == "run.json":
            try:
                record = _stored_record(storage, location, item.key, parts[0], parts[2])
            except untrusted.Refused as exc:
                ctx.reporter.warn(f"{exc.message}; left out")
                continue
            if record is not None:
                key = location.run_key(parts[0], parts[2])
                size = sum(o.size for o in storage.objects(key))
                found.append(StoredRun(record, tuple(durable_steps(storage, key)), size))
    return sorted(found, key=lambda s: s.record.submitted_at, reverse=True)


def _stored_record(storage: Storage, location: StorageLocation, key: str, cluster: str, run: str) -> RunRecord | None:
    """The run.json kept at CLUSTER/runs/RUN/: masters write storage, so it must be that run's, of that
    cluster, under a sound key, before its name becomes a folder or a key here."""
    source = f"the run record {key!r} in {location.url}"
    untrusted.object_key(key, source)
    text = storage.get_text(key)
    if not text:
        return None
    try:
        record = RunRecord.model_validate_json(text)
    except ValidationError as exc:
        raise untrusted.refused(source, "a record", text[:40], not_a_record(exc)) from None
    untrusted.same_run(record.run, run, source)
    if record.cluster != cluster:
        raise untrusted.refused(source, "cluster", record.cluster, f"it is kept under '{cluster}'")
    return checked(record, source)


def stored_run(ctx: CommandContext, run: str | None) -> StoredRun:
    runs = stored_runs(ctx, ctx.config.name)
    if not runs:
        raise ConfigError(f"cluster '{ctx.config.name}' has no run on this machine's records nor in storage",
                          hint="`xeoncluster storage ls` lists the runs kept in storage")
    found = runs[0] if run is None else next((r for r in runs if r.record.run == run), None)
    if found is None:
        raise ConfigError(f"no run '{run}' of cluster '{ctx.config.name}' in storage",
                          hint="`xeoncluster storage ls` lists the runs kept in storage")
    return found


def stored_log(ctx: CommandContext, run: str) -> str:
    location, storage = open_storage(ctx)
    return storage.get_text(f"{location.run_key(ctx.config.name, run)}/train.log") or ""


def fetch_stored_results(ctx: CommandContext, run: str) -> Fetched | None:
    """A finished run's results from storage into $XEONCLUSTER_HOME/results/NAME/RUN."""
    location, storage = open_storage(ctx)
    base = f"{location.run_key(ctx.config.name, run)}/results"
    target = results_dir(ctx, run)
    source = f"storage ({location.url})"
    names = [untrusted.key_below(o.key, base, source) for o in storage.objects(base)]
    paths = {name: untrusted.under(target, name) for name in names}  # every one checked before any is written
    for name, path in paths.items():
        storage.get_file(f"{base}/{name}", path)
    if "metrics.json" not in paths:
        return None
    metrics = stored_metrics(paths["metrics.json"])
    return Fetched(metrics, paths["metrics.json"], [paths[n] for n in sorted(paths) if n != "metrics.json"])


def stored_metrics(path: Path) -> dict[str, Any]:
    """metrics.json as storage or the master kept it: a master's role wrote it, so text that is no JSON
    object is none (its numbers are taken through untrusted.finite where they are shown)."""
    try:
        return untrusted.metrics_of(path, "metrics.json")
    except untrusted.Refused:
        return {}


def remove_stored_run(ctx: CommandContext, cluster: str, run: str) -> int:
    """Every object of the run, in the storage it was kept in; returns how many. RUN must be a run
    name, and the name of a run the cluster keeps there, exactly: never a prefix or a path."""
    if not RUN_NAME.fullmatch(run):
        raise ConfigError(f"storage rm {run!r}: not a run name (1-64 letters, digits, '.', '_' or '-', starting "
                          "with a letter or digit)", hint="`xeoncluster storage ls` lists the runs kept in storage")
    location, storage = open_storage(ctx)
    # A run name has no '/' and storage lists a prefix as a folder (PREFIX/...), so this is that run's
    # objects exactly: never another run whose name starts with it.
    keys = [o.key for o in storage.objects(location.run_key(cluster, run))]
    if not keys:
        raise ConfigError(f"no run '{run}' of cluster '{cluster}' in {location.url}",
                          hint="`xeoncluster storage ls` lists the runs kept there")
    storage.delete(keys)
    return len(keys)
