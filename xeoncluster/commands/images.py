"""`xeoncluster images [build|rm]`: list, bake without keeping a cluster, or remove images."""
from __future__ import annotations

from dataclasses import dataclass

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.image import ImageAction, ImagePlan, decide_image
from xeoncluster.cluster.state import StateDir
from xeoncluster.commands.up import up
from xeoncluster.core.errors import ConfigError
from xeoncluster.core.stacks import get_stack
from xeoncluster.operations import down
from xeoncluster.providers.base import Image, Removed
from xeoncluster.providers.registry import image_id_texts, is_image_id


@dataclass(frozen=True)
class RemovedImage:
    image_id: str
    removed: Removed


def list_images(ctx: CommandContext) -> list[Image]:
    return ctx.provider.images()


def remove(ctx: CommandContext, image_id: str) -> RemovedImage:
    if not is_image_id(image_id):
        raise ConfigError(f"images rm {image_id!r}: not an image id ({image_id_texts()})",
                          hint="`xeoncluster images` lists them")
    removed = ctx.provider.remove_image(image_id)
    if removed.empty:
        raise ConfigError(f"no image '{image_id}'", hint="`xeoncluster images` lists them")
    return RemovedImage(image_id, removed)


def build(ctx: CommandContext) -> ImagePlan:
    """Bake without keeping a cluster: a one-node cluster that is removed again."""
    plan = decide_image(ctx.config, ctx.provider, get_stack(ctx.config.stack))
    if plan.action is not ImageAction.BAKE:
        return plan
    builder = ctx.config.model_copy(update={"nodes": 1, "name": f"{ctx.config.name[:18]}-bake", "image": "auto"})
    build_ctx = CommandContext(builder, StateDir(builder.name, ctx.state.path.parent.parent), ctx.provider,
                               ctx.reporter, ctx.shell_factory)
    try:
        result = up.run(build_ctx)
    finally:
        down.run(build_ctx)
    return result.image or plan
