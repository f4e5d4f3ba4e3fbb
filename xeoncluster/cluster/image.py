"""The image key (a digest of base image, playbooks and stack) and the one image decision.

`plan` shows the ImagePlan that `up` then executes: both call `decide_image`.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xeoncluster.cluster.playbook import playbook_paths
from xeoncluster.core.errors import ConfigError
from xeoncluster.core.stacks import Stack
from xeoncluster.providers.abilities import BakesInBackground, base_image
from xeoncluster.providers.base import Image, PendingImage

if TYPE_CHECKING:
    from xeoncluster.providers.base import Provider
    from xeoncluster.providers.config import ClusterConfig


def stack_digest(stack: Stack) -> str:
    text = "\n".join([stack.name, stack.python, *stack.packages])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def image_key(base: str, stack: Stack, playbooks: list[Path] | None = None) -> str:
    digest = hashlib.sha256()
    digest.update(f"base={base}\nstack={stack_digest(stack)}\n".encode())
    for path in playbooks if playbooks is not None else playbook_paths():
        digest.update(f"playbook={path.name}\n".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


class ImageAction(StrEnum):
    REUSE = "reuse"  # an image baked earlier for this key
    BAKE = "bake"    # none yet: the master runs the playbooks, is baked, workers start from the image
    GIVEN = "given"  # an image id from the config: nothing is baked
    NONE = "none"    # image: none: every node runs the playbooks


@dataclass(frozen=True)
class ImagePlan:
    key: str | None  # None only in a plan whose base image is unknown
    image: Image | None
    action: ImageAction
    base_id: str | None = None
    base_note: str = ""  # why base_id is None
    background: str | None = None  # an image still being baked after `up` (image_strategy: parallel)
    # Bake in the background: every node is configured from the base image at once (image_strategy:
    # parallel, where the provider's cloud finishes images by itself).
    in_background: bool = False
    # No usable image yet, but an earlier `up` is baking one (or its bake failed): `up` decides
    # whether to wait for it (up_image.settle); `plan` only says so.
    pending: PendingImage | None = None

    @property
    def runs_playbooks(self) -> bool:
        return self.action in (ImageAction.BAKE, ImageAction.NONE)

    def describe(self) -> str:
        key = (self.key or "unknown")[:12]
        if self.action is ImageAction.REUSE:
            return f"reusing image {self.image.id} (key {key})"  # type: ignore[union-attr]  # REUSE plans carry the found image
        if self.action is ImageAction.GIVEN:
            return f"using the given image {self.image.id}; nothing is baked"  # type: ignore[union-attr]  # GIVEN plans carry the image
        if self.pending is not None:
            return f"image {describe_pending(self.pending, time.time())}"
        if self.action is ImageAction.NONE and self.background is not None:
            return (f"image {self.background} (key {key}) is still being baked by an earlier up; every node starts "
                    "from the base image and runs the playbooks, which is quicker than waiting; later ups reuse it")
        if self.action is ImageAction.NONE:
            return "image: none; every node runs the playbooks"
        if self.background is not None:
            return f"image {self.background} is being baked in the background (key {key}); later ups reuse it"
        if self.image is not None:
            return f"baked image {self.image.id} (key {key}); later ups reuse it"
        if self.in_background:
            return (f"no image for key {key} yet; every node will be configured from the base image, and the "
                    "image baked in the background for later ups")
        return f"no image for key {key} yet; the master will be configured and baked"

    def to_dict(self) -> dict[str, Any]:
        pending = None if self.pending is None else {
            "id": self.pending.id, "failed": self.pending.failed, "progress": self.pending.progress,
            "seconds_left": self.pending.remaining_seconds(time.time()),
            "configure_seconds": self.pending.configure_seconds, "up_waits": self.pending.worth_waiting(time.time())}
        return {"key": self.key, "id": self.image.id if self.image else None, "action": self.action.value,
                "base_id": self.base_id, "base_note": self.base_note, "in_background": self.in_background,
                "pending": pending}


def describe_pending(pending: PendingImage, now: float) -> str:
    """What `plan` says of an image an earlier `up` is still baking, and what `up` would do about it."""
    if pending.failed:
        return f"{pending.id} of this key failed to bake; up removes it and bakes again"
    left = pending.remaining_seconds(now)
    done = f"{pending.progress:.0%} done" if pending.progress is not None else "progress unknown"
    eta = f", about {left:.0f}s left" if left is not None else ""
    took = (f"configuring from the base took {pending.configure_seconds:.0f}s"
            if pending.configure_seconds is not None else "how long configuring takes is unknown")
    if pending.worth_waiting(now):
        return f"{pending.id} is being baked ({done}{eta}); up waits for it ({took})"
    return (f"{pending.id} is being baked ({done}{eta}); up starts every node from the base image instead "
            f"({took}), and later ups reuse the image")


def decide_image(cluster: ClusterConfig, provider: Provider, stack: Stack) -> ImagePlan:
    """Read-only. A bad image id fails here, before anything exists."""
    base = base_image(provider, cluster)
    key = image_key(base.id, stack) if base.id else None
    if cluster.image == "none":
        return ImagePlan(key, None, ImageAction.NONE, base.id, base.note)
    if cluster.image != "auto":
        given = provider.get_image(cluster.image)
        if given is None:
            raise ConfigError(f"image: {cluster.image} does not exist for the {provider.name} provider",
                              hint="`xeoncluster images` lists the images you have; or use image: auto")
        return ImagePlan(key, given, ImageAction.GIVEN, base.id, base.note)
    found = provider.find_image(key) if key else None
    if found:
        return ImagePlan(key, found, ImageAction.REUSE, base.id, base.note)
    background = provider if isinstance(provider, BakesInBackground) else None
    in_background = cluster.image_strategy == "parallel" and background is not None
    pending = background.pending_image(key) if key and background is not None else None
    return ImagePlan(key, None, ImageAction.BAKE, base.id, base.note, in_background=in_background, pending=pending)
