"""`xeoncluster down`: remove everything the cluster owns, found by name/tag even without state."""
from __future__ import annotations

from dataclasses import dataclass

from ..context import CommandContext
from ..providers.base import Removed


@dataclass(frozen=True)
class DownResult:
    cluster: str
    removed: Removed


def run(ctx: CommandContext, purge_images: bool = False) -> DownResult:
    with ctx.state.lock("down"), ctx.reporter.step(f"removing cluster '{ctx.config.name}'"):
        removed = ctx.provider.terminate(ctx.config)
        if purge_images:
            removed = removed.merge(ctx.provider.purge_images(ctx.config))
        ctx.state.remove()
    return DownResult(ctx.config.name, removed)
