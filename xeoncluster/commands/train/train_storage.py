"""The storage side of `train`: where the run is kept, that the master's agent may write there, and
the checkpoint a resumed run takes from storage when no node has it any more (every node lost, or a
new cluster). A run of another cluster in the same storage is taken only when the user names it
(`--resume-from CLUSTER/RUN`): clusters sharing a bucket never hand each other checkpoints unasked."""
from __future__ import annotations

import re

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.state import ClusterRecord
from xeoncluster.core.errors import ConfigError
from xeoncluster.job.train_plan import check_run_name
from xeoncluster.job.train_request import TrainRequest
from xeoncluster.providers.abilities import AgentOnMaster
from xeoncluster.providers.config import NAME_PATTERN
from xeoncluster.runs.stored_checkpoints import durable_steps
from xeoncluster.storage.base import MANIFEST, StorageLocation


def run_storage(ctx: CommandContext, request: TrainRequest, record: ClusterRecord) -> StorageLocation:
    """`--storage` wins over the config; either is checked (and an `auto` bucket made) here."""
    url = request.storage or ctx.config.storage.url
    location = ctx.provider.storage_location(ctx.config, url, ctx.state.home / "storage", create=True)
    if isinstance(ctx.provider, AgentOnMaster) and location != record.storage:
        # The master's role reaches only its own prefix: point it at this storage.
        image_key = record.image.key if record.image else None
        ctx.provider.prepare_agent_access(ctx.config, None, image_key, location)
    return location


def resume_source(value: str, run: str | None) -> tuple[str, str]:
    """`--resume-from CLUSTER/RUN`: (CLUSTER, RUN), both checked; `--run`, if given, must be RUN."""
    cluster, _, name = value.partition("/")
    if not re.fullmatch(NAME_PATTERN, cluster) or not name:
        raise ConfigError(f"--resume-from {value!r}: expected CLUSTER/RUN, the name of the cluster that made the run "
                          "and the run's", hint="`xeoncluster storage ls --all` lists the runs kept in storage")
    check_run_name(name)
    if run is not None and run != name:
        raise ConfigError(f"--run {run} and --resume-from {value}: the run keeps its name on this cluster",
                          hint=f"drop --run, or use --run {name}")
    return cluster, name


def stored_checkpoint(ctx: CommandContext, location: StorageLocation, run: str,
                      source: str | None = None) -> int | None:
    """The newest durable checkpoint of `run` in this cluster's storage. Another cluster's run is taken
    only when the user names that cluster (`source`, from --resume-from): it is copied under this
    cluster's prefix first, the only one the master's role reaches."""
    storage = ctx.provider.open_storage(location)
    own = location.run_key(ctx.config.name, run)
    steps = durable_steps(storage, own)
    if steps or source is None or source == ctx.config.name:
        return steps[-1] if steps else None
    theirs = location.run_key(source, run)
    found = durable_steps(storage, theirs)
    if not found:
        return None
    step = found[-1]
    ctx.reporter.info(f"checkpoint-{step} of run {run} of cluster {source} found under {theirs}; copying it to this "
                      "cluster's storage")
    prefix = f"{theirs}/checkpoints/checkpoint-{step}"
    objects = storage.objects(prefix)
    for item in sorted(objects, key=lambda o: o.key.endswith(MANIFEST)):  # the manifest last
        storage.copy(item.key, f"{own}/checkpoints/checkpoint-{step}/{item.key[len(prefix) + 1:]}")
    return step


def clusters_with_run(ctx: CommandContext, location: StorageLocation, run: str) -> tuple[str, ...]:
    """The other clusters whose stored run `run` has a durable checkpoint (to name in a hint, never used)."""
    storage = ctx.provider.open_storage(location)
    root = location.key()
    names = set()
    for item in storage.objects(root):
        parts = item.key[len(root):].strip("/").split("/")
        if len(parts) > 3 and parts[1:3] == ["runs", run] and parts[0] != ctx.config.name:
            names.add(parts[0])
    return tuple(sorted(n for n in names if durable_steps(storage, location.run_key(n, run))))


def no_checkpoint(run: str, master: str, location: StorageLocation, run_known: bool,
                  elsewhere: tuple[str, ...] = ()) -> ConfigError:
    if elsewhere and not run_known:
        return ConfigError(f"--resume: no run '{run}' on {master} (master), nor in this cluster's part of "
                           f"{location.url}",
                           hint=f"run {run} of cluster {elsewhere[0]} is kept there: continue it here with "
                                f"--resume-from {elsewhere[0]}/{run}")
    if not run_known:
        return ConfigError(f"--resume: no run '{run}' on {master} (master), nor in {location.url}",
                           hint="`xeoncluster runs` lists the runs; drop --resume to start a new one")
    return ConfigError(f"--resume: run '{run}' has no checkpoint on {master} (master), nor in {location.url}",
                       hint="checkpoints are written every --save-steps steps; start a new run instead")
