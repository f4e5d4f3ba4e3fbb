"""The storage side of `train`: where the run is kept, that the master's agent may write there, and
the checkpoint a resumed run takes from storage when no node has it any more (every node lost, or a
new cluster, even of another name)."""
from __future__ import annotations

from ..agent.storage_sync import durable_steps
from ..context import CommandContext
from ..errors import ConfigError
from ..state import ClusterRecord
from ..storage.base import Storage, StorageLocation
from ..train_plan import TrainRequest


def run_storage(ctx: CommandContext, request: TrainRequest, record: ClusterRecord) -> StorageLocation:
    """`--storage` wins over the config; either is checked (and an `auto` bucket made) here."""
    url = request.storage or ctx.config.storage.url
    location = ctx.provider.storage_location(ctx.config, url, ctx.state.home / "storage", create=True)
    if ctx.provider.agent_on_master and location != record.storage:
        # The master's role reaches only its own prefix: point it at this storage.
        image_key = record.image.key if record.image else None
        ctx.provider.prepare_agent_access(ctx.config, None, image_key, location)
    return location


def stored_checkpoint(ctx: CommandContext, location: StorageLocation, run: str) -> int | None:
    """The newest durable checkpoint of `run` in storage. A run kept under another cluster's name is
    copied under this cluster's first: the master's role reaches only this cluster's prefix."""
    storage = ctx.provider.open_storage(location)
    own = location.run_key(ctx.config.name, run)
    steps = durable_steps(storage, own)
    if steps:
        return steps[-1]
    found = _elsewhere(storage, location, run, ctx.config.name)
    if found is None:
        return None
    key, step = found
    ctx.reporter.info(f"checkpoint-{step} of run {run} found under {key}; copying it to this cluster's storage")
    prefix = f"{key}/checkpoints/checkpoint-{step}"
    objects = storage.objects(prefix)
    for item in sorted(objects, key=lambda o: o.key.endswith("MANIFEST.json")):  # the manifest last
        storage.copy(item.key, f"{own}/checkpoints/checkpoint-{step}/{item.key[len(prefix) + 1:]}")
    return step


def _elsewhere(storage: Storage, location: StorageLocation, run: str, cluster: str) -> tuple[str, int] | None:
    candidates = []
    for item in storage.objects(location.key()):
        parts = item.key[len(location.key()):].strip("/").split("/")
        if len(parts) > 3 and parts[1:3] == ["runs", run] and parts[0] != cluster:
            candidates.append(location.run_key(parts[0], run))
    best = max(((key, steps[-1]) for key in set(candidates) if (steps := durable_steps(storage, key))),
               key=lambda found: found[1], default=None)
    return best


def no_checkpoint(run: str, master: str, location: StorageLocation, run_known: bool) -> ConfigError:
    if not run_known:
        return ConfigError(f"--resume: no run '{run}' on {master} (master), nor in {location.url}",
                           hint="`xeoncluster runs` lists the runs; drop --resume to start a new one")
    return ConfigError(f"--resume: run '{run}' has no checkpoint on {master} (master), nor in {location.url}",
                       hint="checkpoints are written every --save-steps steps; start a new run instead")
