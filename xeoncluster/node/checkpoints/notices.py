"""Where a node learns that it is going away, or that the run should stop.

Each provider names the source its nodes poll (`XC_NOTICES`, set by the CLI from the provider):
`aws-imds` reads EC2's spot instance-action (about two minutes ahead) and its rebalance
recommendation (often earlier). A stop file (`XC_STOP_FILE`) works everywhere: the run agent
creates it on the master when it wants the ranks to checkpoint and stop. A new provider adds its
source here and names it; nothing else in training changes.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal, Protocol

from xeoncluster.node.rank_env import XC_NOTICES, XC_STOP_FILE

Kind = Literal["interruption", "rebalance", "stop"]


@dataclass(frozen=True)
class Notice:
    kind: Kind
    reason: str
    deadline: float | None = None  # epoch seconds when the node goes away, where the source says


class NoticeSource(Protocol):
    def poll(self) -> Notice | None: ...


@dataclass(frozen=True)
class StopFile:
    path: Path

    def poll(self) -> Notice | None:
        return Notice("stop", "stop requested") if self.path.exists() else None


@dataclass(frozen=True)
class NodeFile:
    """A notice left in the node's own home (`~/xeoncluster/notice`): how a node on this machine (the
    local provider, a namespace with a private home) announces its end. JSON: {"reason", "deadline"}."""

    path: Path = Path("~/xeoncluster/notice")

    def poll(self) -> Notice | None:
        try:
            data = json.loads(self.path.expanduser().read_text() or "{}")
        except (OSError, ValueError):
            return None
        deadline = data.get("deadline")
        return Notice("interruption", str(data.get("reason") or "interruption notice"),
                      float(deadline) if deadline is not None else None)


IMDS = "http://169.254.169.254/latest"


@dataclass
class AwsImds:
    """IMDSv2: a session token, then spot/instance-action (404 until EC2 schedules the reclaim) and
    events/recommendations/rebalance (404 until EC2 sees an elevated risk)."""

    timeout: float = 1.0
    base: str = IMDS

    def poll(self) -> Notice | None:
        action = self._get("meta-data/spot/instance-action")
        if action:
            return Notice("interruption", f"spot interruption notice ({action.strip()})", _action_time(action))
        rebalance = self._get("meta-data/events/recommendations/rebalance")
        if rebalance:
            return Notice("rebalance", f"rebalance recommendation ({rebalance.strip()})")
        return None

    def _get(self, path: str) -> str | None:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            token_request = urllib.request.Request(f"{self.base}/api/token", method="PUT",  # noqa: S310 - IMDS is a fixed http:// URL
                                                   headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
            token = opener.open(token_request, timeout=self.timeout).read().decode()
            request = urllib.request.Request(f"{self.base}/{path}",  # noqa: S310 - IMDS is a fixed http:// URL
                                             headers={"X-aws-ec2-metadata-token": token})
            return str(opener.open(request, timeout=self.timeout).read().decode())
        except OSError:
            return None  # 404 until there is something to say; unreachable where there is no IMDS


def _action_time(document: str) -> float | None:
    """EC2's instance-action names the moment of the reclaim: {"action": "terminate", "time": "...Z"}."""
    try:
        stamp = str(json.loads(document)["time"])
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except (ValueError, KeyError, TypeError):
        return None


SOURCES: dict[str, Callable[[], NoticeSource]] = {"aws-imds": AwsImds, "node-file": NodeFile}


def sources_from_env(env: Mapping[str, str]) -> list[NoticeSource]:
    """The stop file first (the agent's word is final), then the provider's own sources."""
    found: list[NoticeSource] = []
    if env.get(XC_STOP_FILE):
        found.append(StopFile(Path(env[XC_STOP_FILE])))
    for name in filter(None, env.get(XC_NOTICES, "").split(",")):
        if name not in SOURCES:
            raise ValueError(f"XC_NOTICES: unknown notice source {name!r}; known: {', '.join(sorted(SOURCES))}")
        found.append(SOURCES[name]())
    return found
