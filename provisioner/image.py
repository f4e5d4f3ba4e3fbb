"""The image key (a digest of base image, playbooks and stack) and the bake-or-reuse decision."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import ConfigError
from .playbook import playbook_paths
from .providers.base import Image
from .stacks import Stack

if TYPE_CHECKING:
    from .config import ClusterConfig
    from .providers.base import Provider


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


@dataclass(frozen=True)
class ImageChoice:
    key: str
    image: Image | None
    action: str  # "reuse" | "bake" | "given" | "none"

    def describe(self) -> str:
        if self.action == "reuse":
            return f"reusing image {self.image.id} (key {self.key[:12]})"  # type: ignore[union-attr]
        if self.action == "given":
            return f"using the given image {self.image.id}; nothing is baked"  # type: ignore[union-attr]
        if self.action == "none":
            return "image: none; every node runs the playbooks"
        if self.image is not None:
            return f"baked image {self.image.id} (key {self.key[:12]}); later ups reuse it"
        return f"no image for key {self.key[:12]} yet; the master will be configured and baked"


def choose_image(cluster: "ClusterConfig", provider: "Provider", key: str) -> ImageChoice:
    if cluster.image == "none":
        return ImageChoice(key, None, "none")
    if cluster.image != "auto":
        given = provider.get_image(cluster.image)
        if given is None:
            raise ConfigError(f"image: {cluster.image} does not exist for the {provider.name} provider",
                              hint="`xeoncluster images` lists the images you have; or use image: auto")
        return ImageChoice(key, given, "given")
    found = provider.find_image(key)
    return ImageChoice(key, found, "reuse" if found else "bake")
