"""What each provider declares about itself, so that no layer above it has to know its name.

A spec is light (no cloud SDK is imported): config validation, `plan` and `train --dry-run` read it
before any provider exists. It declares the provider's own config section (`settings`), which
config.py adds to the schema under the provider's name. What builds the provider, finds its
leftovers and prints its access policy is its plugin (plugin.py), typed and checked by mypy, which
needs the config and so cannot sit beside the spec. A new provider adds a spec and a plugin, one entry
in registry.specs() and one in plugins.plugins(); the config, commands and training code stay as
they are.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel


@dataclass(frozen=True)
class ProviderSpec:
    name: str
    image_id: re.Pattern[str]      # what one of its image ids looks like
    image_id_text: str             # the same, for people
    default_user: str              # who logs in to its nodes
    instance_id: re.Pattern[str]   # what its nodes' ids look like (checked whole: untrusted.py)
    # The interruption source its nodes poll (xeoncluster/node/checkpoints/notices.py); None: nodes get no notice.
    notices: str | None = None
    # Its own section of cluster.yaml, under its name (`aws:`, `local:`); None for a provider with no keys.
    settings: type[BaseModel] | None = None
    # Fills in the provider's defaults (e.g. the region) in its own config section (ClusterConfig.<name>).
    complete: Callable[[Any], None] = lambda _section: None
    # The command a node runs to power itself off for good, as its dead-man switch (orphan_minutes);
    # None for a provider whose nodes bill nothing (and where a shutdown would stop the wrong machine).
    poweroff: str | None = None
    # What a cold `up` can take on this provider: a `max_hours` deadline shorter than that is refused.
    up_minutes: float = 2.0
    # What a replacement for a noticed node takes to be ready to join the run (launch, boot, SSH, the run's
    # files): a notice with less time left does not wait for one; the run trains on without the node.
    replace_seconds: float = 10.0
    storage_url: re.Pattern[str] | None = None  # the storage URLs it serves besides a folder (checked whole)
    storage_url_text: str = ""     # the same, for people
    # Variables of the master's own environment its agent keeps (where the cloud's API is, if not the
    # public one: a VPC endpoint, the stand-in).
    agent_env: tuple[str, ...] = ()
    # (instance type, market) its config section asks for: what one of its machines in a Kubernetes
    # cluster is, for `export`; None where it has no machine types.
    machine_of: Callable[[Any], tuple[str, str]] | None = None
    # Keys of its config section (ClusterConfig.<name>) that were top-level before 0.2: they still load there.
    moved_keys: tuple[str, ...] = ()
