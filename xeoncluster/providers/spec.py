"""What each provider declares about itself, so that no layer above it has to know its name.

A spec is light (no cloud SDK is imported): config validation, `plan` and `train --dry-run` read it
before any provider exists. A new provider adds a spec module and one entry in SPECS; the config,
commands and training code stay as they are.
"""
from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xeoncluster.config import ClusterConfig
    from xeoncluster.providers.base import Provider

DEFAULT_PROVIDER = "aws"
FieldCheck = Callable[[Any], Any]  # returns the value (possibly normalised) or raises ValueError


@dataclass(frozen=True)
class ProviderSpec:
    name: str
    image_id: re.Pattern[str]      # what one of its image ids looks like
    image_id_text: str             # the same, for people: "an AMI id (ami-...)"
    default_user: str              # who logs in to its nodes
    instance_id: re.Pattern[str]   # what its nodes' ids look like (checked whole: untrusted.py)
    # The interruption source its nodes poll (xeoncluster/node/notices.py); None: nodes get no notice.
    notices: str | None = None
    # Checks of the shared keys that only mean something for this provider (region, instance types).
    field_checks: Mapping[str, FieldCheck] = field(default_factory=dict)
    complete: Callable[[ClusterConfig], None] = lambda _config: None  # provider defaults, e.g. the region
    # A cluster of this name found on this machine without its state: the config keys that reach it.
    # Only providers whose clusters live here can answer without credentials; others return None.
    locate: Callable[[ClusterConfig], dict[str, Any] | None] = lambda _config: None
    factory: str = ""              # "module:function" that builds the provider from a config
    # What a cold `up` can take on this provider: a `max_hours` deadline shorter than that is refused.
    up_minutes: float = 2.0
    # "module:function(account, boundary) -> (document, how)": the access policy (or the permissions
    # boundary) an account needs to run this provider; "" where it needs none.
    access_documents: str = ""

    def make(self, config: ClusterConfig, events: Callable[[str], None]) -> Provider:
        module, _, function = self.factory.partition(":")
        built: Provider = getattr(importlib.import_module(module), function)(config, events)
        return built


def specs() -> dict[str, ProviderSpec]:
    from xeoncluster.providers.aws.spec import AWS
    from xeoncluster.providers.local.spec import LOCAL

    return {spec.name: spec for spec in (AWS, LOCAL)}


def spec_for(name: str) -> ProviderSpec:
    return specs()[name]


def check_field(key: str, value: Any) -> Any:
    """Run every provider's check of a shared key; a value no provider accepts is bad input."""
    for spec in specs().values():
        check = spec.field_checks.get(key)
        if check is not None:
            value = check(value)
    return value


def is_image_id(value: str) -> bool:
    return any(spec.image_id.fullmatch(value) for spec in specs().values())


def image_id_texts() -> str:
    return ", ".join(spec.image_id_text for spec in specs().values())


def locate_without_state(config: ClusterConfig) -> dict[str, Any] | None:
    """Config overrides that reach a cluster this machine still holds although its state is gone."""
    return next((found for spec in specs().values() if (found := spec.locate(config)) is not None), None)


def check_image(value: str) -> str:
    if value in ("auto", "none") or is_image_id(value):
        return value
    raise ValueError(f"must be 'auto', 'none', {image_id_texts()}")
