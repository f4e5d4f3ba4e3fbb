"""What each provider declares about itself, so that no layer above it has to know its name.

A spec is light (no cloud SDK is imported): config validation, `plan` and `train --dry-run` read it
before any provider exists. It sits on the config's floor and imports nothing of its provider: it names
what builds the provider, and what finds its leftovers, as "module:function" (resolved by
xeoncluster/providers/__init__.py). A new provider adds a spec module and one entry in
registry.specs(); the config, commands and training code stay as they are.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

FieldCheck = Callable[[Any], Any]  # returns the value (possibly normalised) or raises ValueError


@dataclass(frozen=True)
class ProviderSpec:
    name: str
    image_id: re.Pattern[str]      # what one of its image ids looks like
    image_id_text: str             # the same, for people
    default_user: str              # who logs in to its nodes
    instance_id: re.Pattern[str]   # what its nodes' ids look like (checked whole: untrusted.py)
    # The interruption source its nodes poll (xeoncluster/node/checkpoints/notices.py); None: nodes get no notice.
    notices: str | None = None
    # Checks of the shared keys that only mean something for this provider (region, instance types).
    field_checks: Mapping[str, FieldCheck] = field(default_factory=dict)
    # Fills in the provider's defaults (e.g. the region) in its own config section (ClusterConfig.<name>).
    complete: Callable[[Any], None] = lambda _section: None
    # "module:function(config) -> dict | None": a cluster of this name found on this machine without its
    # state, as the config keys that reach it. Only providers whose clusters live here can answer
    # without credentials; "" for the others.
    locate: str = ""
    factory: str = ""              # "module:function(config, events) -> Provider"
    # What a cold `up` can take on this provider: a `max_hours` deadline shorter than that is refused.
    up_minutes: float = 2.0
    # "module:function(account, boundary) -> (document, how)": the access policy (or the permissions
    # boundary) an account needs to run this provider; "" where it needs none.
    access_documents: str = ""
    storage_url: re.Pattern[str] | None = None  # the storage URLs it serves besides a folder (checked whole)
    storage_url_text: str = ""     # the same, for people
    # Variables of the master's own environment its agent keeps (where the cloud's API is, if not the
    # public one: a VPC endpoint, the stand-in).
    agent_env: tuple[str, ...] = ()
    # A module with lookup(name), nearest(name), known_names() and topology_of(kind) for its machine
    # types, which also size pods on a Kubernetes cluster of its machines; "" for none.
    catalog: str = ""
    # (instance type, market) its config section asks for: what one of its machines in a Kubernetes
    # cluster is, for `export`; None where it has no machine types.
    machine_of: Callable[[Any], tuple[str, str]] | None = None
    # Keys of its config section (ClusterConfig.<name>) that were top-level before 0.2: they still load there.
    moved_keys: tuple[str, ...] = ()
