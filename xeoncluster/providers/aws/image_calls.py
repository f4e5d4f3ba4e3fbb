"""The AWS provider's image calls (images.py), made for the caller, or for the owner the run agent acts for:
the provider's only image lookups, so none of them can find an image another identity made."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xeoncluster.core.errors import ProviderError
from xeoncluster.providers.aws import images as aws_images
from xeoncluster.providers.aws.clients import translated
from xeoncluster.providers.base import TAG_OWNER, Image, Node, PendingImage, Removed
from xeoncluster.providers.config import ClusterConfig


class ImageCalls:
    """Mixed into AwsProvider, which supplies what is declared here."""

    events: Callable[[str], None]
    sleep: Callable[[float], None]
    image_wait: dict[str, int]

    @property
    def ec2(self) -> Any:
        raise NotImplementedError

    def owner(self) -> str:
        raise NotImplementedError

    def _warn_once(self, line: str) -> None:
        raise NotImplementedError

    def find_image(self, key: str) -> Image | None:
        """Only an image the caller made: a colleague can tag an image of theirs with the same key."""
        with translated(f"looking up the image for key {key[:16]}"):
            mine, others = aws_images.find_image(self.ec2, key, self.owner())
        for other in others:
            self._warn_once(f"image {other.id} of this key belongs to another identity "
                            f"({TAG_OWNER}={other.owner or 'none'}): left alone, never used for your nodes")
        return mine

    def pending_image(self, key: str) -> PendingImage | None:
        with translated(f"looking up images of key {key[:16]} still being baked"):
            return aws_images.pending_image(self.ec2, key, self.owner())

    def wait_for_image(self, image_id: str, timeout: float) -> Image | None:
        delay = self.image_wait["Delay"]
        attempts = max(1, int(timeout // delay) if delay else self.image_wait["MaxAttempts"])
        try:
            with translated(f"waiting for image {image_id}"):
                self.ec2.get_waiter("image_available").wait(
                    ImageIds=[image_id], WaiterConfig={"Delay": delay, "MaxAttempts": attempts})
        except ProviderError as exc:
            self.events(f"image {image_id} is not usable yet ({exc.message})")
            return None
        return self.get_image(image_id)

    def start_bake(self, cluster: ClusterConfig, node: Node, key: str,
                   on_snapshot: Callable[[], None] | None = None, configure_seconds: float | None = None) -> str:
        with translated(f"baking an image from {node.name} ({node.id})"):
            image_id = aws_images.start_bake(self.ec2, cluster.name, node.id, key, self.owner(), configure_seconds)
        if on_snapshot is not None:
            on_snapshot()
        self.events(f"image {image_id} is being baked from {node.name} in the background; later ups reuse it")
        return image_id

    def get_image(self, image_id: str) -> Image | None:
        with translated(f"describing image {image_id}"):
            raw = aws_images.describe_image(self.ec2, image_id)
        return aws_images.to_image(raw) if raw else None

    def bake(self, cluster: ClusterConfig, node: Node, key: str,
             on_snapshot: Callable[[], None] | None = None) -> Image:
        with translated(f"baking an image from {node.name} ({node.id})"):
            image = aws_images.bake(self.ec2, cluster.name, node.id, key, self.owner(), self.image_wait, self.sleep,
                                    on_snapshot)
        self.events(f"baked image {image.id} from {node.name} for key {key[:16]}")
        return image

    def images(self) -> list[Image]:
        with translated("listing images"):
            return aws_images.own_images(self.ec2, self.owner())

    def remove_image(self, image_id: str) -> Removed:
        with translated(f"removing image {image_id}"):
            return aws_images.remove_image(self.ec2, image_id, self.sleep)

    def purge_images(self, cluster: ClusterConfig) -> Removed:
        with translated(f"removing the images of cluster {cluster.name}"):
            return aws_images.purge_images(self.ec2, cluster.name, self.sleep, self.owner())
