"""The local provider's declaration: its `local:` config section, image ids and login user."""
from __future__ import annotations

import ipaddress
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from xeoncluster.providers.spec import ProviderSpec

DEFAULT_LOCAL_ROOT = Path("/var/lib/xeoncluster")
HOMES = Path("/root")
NETNS_PREFIX = "xc-"  # every local node's network namespace, so that leftovers can be found by name


class LocalSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    subnet: str = "10.213.0.0/24"
    root: Path = DEFAULT_LOCAL_ROOT
    cpus_per_node: int | None = Field(default=None, ge=1, le=4096, strict=True)

    @field_validator("subnet")
    @classmethod
    def _subnet(cls, value: str) -> str:
        try:
            net = ipaddress.IPv4Network(value, strict=True)
        except ValueError:
            raise ValueError("must be a private IPv4 network such as 10.213.0.0/24") from None
        if not net.is_private or net.prefixlen > 28 or net.prefixlen < 16:
            raise ValueError("must be a private IPv4 network between /16 and /28")
        return str(net)

    @field_validator("root")
    @classmethod
    def _root(cls, value: Path) -> Path:
        if not value.is_absolute():
            raise ValueError("must be an absolute path")
        if value == HOMES or HOMES in value.parents:
            raise ValueError("must be outside /root: local nodes' homes are overlaid at /root")
        return value


LOCAL = ProviderSpec(
    name="local",
    image_id=re.compile(r"local-[0-9a-f]{8,64}"),
    image_id_text="a local image id (local-...)",
    default_user="root",
    instance_id=re.compile(rf"{re.escape(NETNS_PREFIX)}[a-z][a-z0-9-]{{0,23}}-node\d{{1,4}}"),  # netns_name()
    notices="node-file",
    settings=LocalSettings,
)
