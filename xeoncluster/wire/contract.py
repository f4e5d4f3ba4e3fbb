"""The versions of what crosses the wire between this CLI and a cluster's agent.

Every record this release writes carries `version`: run.json, request.json, the agent's state.json,
version.json on the master, and each event of the ranks (node/events/events.py). A record without one was
written before 0.2 (version 1), and is still read. An agent whose version.json says less than
VERSION (or that has none) is older than this CLI: commands that only read still work, and say once
that `xeoncluster up` upgrades it.
"""
from __future__ import annotations

import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

from xeoncluster.node.events.events import EVENTS_VERSION

VERSION = EVENTS_VERSION  # one version for the whole contract; the ranks' events define it, lowest
UNVERSIONED = 1  # what a record without a version is: written by an agent before 0.2

# The agent as `ps` shows it: `python -m xeoncluster.agent run|watch CLUSTER ...`; before 0.2 it ran
# as `provisioner.agent`, and such an agent may still be at work on a cluster made then.
AGENT_MODULE = "xeoncluster.agent"
AGENT_MODULES = (AGENT_MODULE, "provisioner.agent")
AGENT_PATTERN = r"(xeoncluster|provisioner)\.agent"
# `python -m xeoncluster.agent hold`'s exit status when another repair holds the cluster's queue.
QUEUE_HELD_ELSEWHERE = 3


def is_agent(pid: int, role: str = "") -> str:
    """A shell test that succeeds when process `pid` is alive and is one of our agents (`role`: run or
    watch; "" for either). A recorded pid may have been reused by anything since."""
    pattern = shlex.quote(f"{AGENT_PATTERN} {role}".rstrip())
    return f"kill -0 {int(pid)} 2>/dev/null && tr '\\0' ' ' < /proc/{int(pid)}/cmdline | grep -qE {pattern}"


class Versioned(BaseModel):
    """A record that says which version of the contract wrote it."""

    version: int = VERSION

    @model_validator(mode="before")
    @classmethod
    def _unversioned(cls, data: Any, info: ValidationInfo) -> Any:
        """Read from a file without a version: written before 0.2. Made by this code: this version."""
        if info.mode == "json" and isinstance(data, dict) and "version" not in data:
            return {**data, "version": UNVERSIONED}
        return data

    def model_dump_json(self, **kwargs: Any) -> str:
        """What this code writes is this version, whatever version it read."""
        return BaseModel.model_dump_json(self.model_copy(update={"version": VERSION}), **kwargs)


class AgentVersion(BaseModel):
    """version.json in the agent's home on the master, written when `up` or `train` installs it."""

    model_config = ConfigDict(extra="ignore")

    version: int = Field(default=UNVERSIONED, ge=UNVERSIONED, le=10_000, strict=True)
    app: str = Field(default="", pattern=r"^[0-9a-f]{0,64}$")  # the digest of the agent's code

    @classmethod
    def parse(cls, text: str) -> AgentVersion:
        """What the master says; it runs the user's code, so anything malformed counts as the oldest."""
        try:
            return cls.model_validate_json(text) if text.strip() else cls()
        except ValidationError:
            return cls()


def older_agent_line(cluster: str, found: int) -> str:
    return (f"the agent on cluster '{cluster}' is older than this CLI (version {found} < {VERSION}): "
            f"`xeoncluster up --name {cluster}` upgrades it, and an active run goes on")
