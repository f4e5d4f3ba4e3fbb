"""What `up` does with an image of its key that an earlier `up` is still baking.

Waiting pays only while the image is expected sooner than configuring from the base would take
(which the `up` that started the bake measured). Otherwise every node starts from the base image,
and the pending bake serves later `up`s. A bake that failed is removed and done again.
"""
from __future__ import annotations

import time
from dataclasses import replace

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.image import ImageAction, ImagePlan
from xeoncluster.core.errors import ProviderError
from xeoncluster.providers.abilities import BakesInBackground


def settle(ctx: CommandContext, plan: ImagePlan) -> ImagePlan:
    pending = plan.pending
    if pending is None or plan.action is not ImageAction.BAKE:
        return plan
    reporter = ctx.reporter
    if pending.failed:
        reporter.warn(f"image {pending.id} of this key failed to bake; removing it and baking again")
        try:
            ctx.provider.remove_image(pending.id)
        except ProviderError as exc:
            # Another user's failed bake, say: the image is its maker's to remove, and harmless beside a new one.
            reporter.warn(f"image {pending.id} stays ({exc.message}); baking a new one beside it")
        return replace(plan, pending=None)
    if pending.worth_waiting(time.time()):
        budget = float(pending.configure_seconds or 0)
        reporter.info(f"image {pending.id} is being baked by an earlier up; waiting up to {budget:.0f}s for it")
        image = ctx.provider.wait_for_image(pending.id, budget) if isinstance(ctx.provider, BakesInBackground) \
            else None
        if image is not None:
            return replace(plan, image=image, action=ImageAction.REUSE, pending=None)
    reporter.info(f"image {pending.id} is still being baked; every node starts from the base image (quicker), "
                  "and later ups reuse the image")
    return replace(plan, action=ImageAction.NONE, background=pending.id, pending=None, in_background=False)
